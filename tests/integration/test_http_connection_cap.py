"""The HTTP API's connection cap (security round 2, finding 5): beyond http_api.max_connections a new
connection is answered 503 and closed, counted, and the API serves again once connections close."""

from __future__ import annotations

import socket
import time
from urllib.parse import urlparse

import pytest
import requests
from helpers.abuse_clients import refused_or_held

from npudure_workshop.lab.local import LocalCluster, free_port

pytestmark = pytest.mark.timeout(120)
CAP = 4


METRICS_PORT = free_port()


@pytest.fixture(scope="module")
def cluster():
    overrides = {"http_api": {"max_connections": CAP}, "metrics_port": METRICS_PORT}
    with LocalCluster(boards=1, http_api=True, scheduler_overrides=overrides) as running:
        yield running


def _address(cluster: LocalCluster) -> tuple[str, int]:
    url = urlparse(cluster.http_url)
    return url.hostname or "127.0.0.1", url.port or 80


def _ping(host: str, port: int) -> int:
    return requests.get(f"http://{host}:{port}/v1/server/status/ping", timeout=5).status_code


def _refused_total(cluster: LocalCluster) -> float:
    text = requests.get(f"http://127.0.0.1:{METRICS_PORT}/metrics", timeout=5).text
    for line in text.splitlines():
        if line.startswith("npudure_scheduler_http_connections_refused_total "):
            return float(line.split()[1])
    raise AssertionError("npudure_scheduler_http_connections_refused_total is not exported")


def test_connections_over_the_cap_get_503_and_the_api_serves_again(cluster: LocalCluster) -> None:
    host, port = _address(cluster)
    before = _refused_total(cluster)
    idle = [socket.create_connection((host, port), timeout=5) for _ in range(CAP)]
    try:
        time.sleep(0.3)  # the server has made each one a connection
        with socket.create_connection((host, port), timeout=5) as extra:
            answer = extra.recv(4096)
        assert answer.startswith(b"HTTP/1.1 503"), answer
        assert _refused_total(cluster) >= before + 1
    finally:
        for sock in idle:
            sock.close()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            if _ping(host, port) == 200:
                break
        except requests.RequestException:
            pass
        time.sleep(0.1)
    assert _ping(host, port) == 200


def test_a_burst_of_connections_is_capped_too(cluster: LocalCluster) -> None:
    """Many connections at once, accepted in one pass of the event loop before any is made a connection:
    the cap counts those it has let in and not yet seen made (1000 at once held 898 open at a cap of 256)."""
    host, port = _address(cluster)
    burst = [socket.create_connection((host, port), timeout=5) for _ in range(CAP * 10)]
    try:
        time.sleep(0.5)
        refused, held = refused_or_held(burst, 0.2)
    finally:
        for sock in burst:
            sock.close()
    assert held <= CAP and refused >= CAP * 9, (held, refused)
