"""The proxyless clients do nothing until started: no route fetched, no thread, no channel."""

from __future__ import annotations

import threading

import pytest
from helpers.fake_channels import ChannelRecorder

from npudure.client import proxyless
from npudure.client.proxyless import Proxyless, ProxylessTarget
from npudure.client.routes import RouteInfo


def test_constructing_the_blocking_client_starts_no_thread_and_fetches_nothing() -> None:
    before = {t.name for t in threading.enumerate()}
    client = Proxyless("127.0.0.1:1")  # nothing listens there: construction must not care
    assert {t.name for t in threading.enumerate()} == before
    with pytest.raises(RuntimeError, match="not started"):
        _ = client.route
    with pytest.raises(RuntimeError, match="not started"):
        client.infer(None)  # type: ignore[arg-type]
    client.close()  # closing a client never started is fine


def test_the_asyncio_client_has_no_route_before_open() -> None:
    target = ProxylessTarget("127.0.0.1:1", connections=3)
    assert target.route is None and target.route_changes == 0 and target.connections == 3


@pytest.mark.parametrize("from_env", [True, False])
async def test_a_fixed_route_target_opens_its_channels_with_or_without_the_environments_credentials(
    monkeypatch: pytest.MonkeyPatch, from_env: bool
) -> None:
    recorder = ChannelRecorder()
    monkeypatch.setattr(proxyless.security, "aio_channel", recorder)
    boards = (("b1", "127.0.0.1:1"),)
    route = RouteInfo("ipv4:127.0.0.1:1", "{}", boards, "v1", False, 4 << 20, 1.0)
    target = ProxylessTarget("127.0.0.1:9", connections=2, fixed_route=route, from_env=from_env)
    await target.open(1.0)
    try:
        # Two board channels, no control channel (a fixed route asks the scheduler nothing).
        assert recorder.seen == [(route.target, from_env)] * 2
        assert target.route == route
    finally:
        await target.close()
