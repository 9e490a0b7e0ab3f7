"""Frigate's zmq endpoint in a sandbox without netlink: libzmq's bind would abort the whole scheduler
(SIGABRT from its getifaddrs assertion, as the lab's hardened unit showed), so the endpoint refuses
first with one line naming the setting, and the rest of the scheduler keeps running."""

from __future__ import annotations

import asyncio
import socket

import pytest

from npudure.config import SchedulerConfig, ZmqApiConfig
from npudure.scheduler import zmq_api
from npudure.scheduler.metrics import SchedulerMetrics
from npudure.security.access import ListenError


class _Scheduler:
    def __init__(self) -> None:
        self.config = SchedulerConfig(
            boards=[{"name": "b1", "address": "127.0.0.1:1"}], zmq_api=ZmqApiConfig(port=0)
        )
        self.metrics = SchedulerMetrics()
        self.dispatch = None


def test_netlink_is_allowed_here() -> None:
    assert zmq_api.netlink_allowed()


def test_netlink_refused_is_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(family: int, *args: object) -> socket.socket:
        raise OSError(97, "Address family not supported by protocol")

    monkeypatch.setattr(zmq_api.stdlib_socket, "socket", refuse)
    assert not zmq_api.netlink_allowed()


def test_without_netlink_the_endpoint_refuses_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(zmq_api, "netlink_allowed", lambda: False)
    api = zmq_api.ZmqApi(_Scheduler(), ZmqApiConfig(port=0))  # type: ignore[arg-type]
    with pytest.raises(ListenError) as caught:
        asyncio.run(api.start())
    message = str(caught.value)
    assert "\n" not in message
    assert "AF_NETLINK" in message and "RestrictAddressFamilies" in message and "zmq_api" in message
    asyncio.run(api.close())
