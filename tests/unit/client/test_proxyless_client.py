"""The proxyless clients do nothing until started: no route fetched, no thread, no channel."""

from __future__ import annotations

import threading

import pytest

from npudure.client.proxyless import Proxyless, ProxylessTarget


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
