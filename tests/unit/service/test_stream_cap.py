"""The stream cap's bookkeeping: who a client is, and places given back."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from npudure.config import ServerLimits
from npudure.service.stream_cap import StreamCap, peer_host


@pytest.mark.parametrize(
    ("peer", "host"),
    [
        ("ipv4:10.0.0.1:5123", "ipv4:10.0.0.1"),
        ("ipv6:[::1]:40000", "ipv6:[::1]"),
        ("unix:/run/npudure.sock", "unix:/run/npudure.sock"),
        ("", "unknown"),
    ],
)
def test_a_client_is_its_address_without_the_port(peer: str, host: str) -> None:
    assert peer_host(SimpleNamespace(peer=lambda: peer)) == host  # type: ignore[arg-type]


def test_places_are_counted_per_client_and_given_back() -> None:
    cap = StreamCap(ServerLimits(max_streams=3, max_streams_per_peer=2))
    a = SimpleNamespace(peer=lambda: "ipv4:10.0.0.1:1")
    b = SimpleNamespace(peer=lambda: "ipv4:10.0.0.2:1")
    assert cap._enter("/W", a)[1] is None and cap._enter("/W", a)[1] is None  # type: ignore[arg-type]
    assert "max_streams_per_peer = 2" in str(cap._enter("/W", a)[1])  # type: ignore[arg-type]
    assert cap._enter("/W", b)[1] is None  # type: ignore[arg-type]
    assert "max_streams = 3" in str(cap._enter("/W", b)[1])  # type: ignore[arg-type]
    cap._leave("ipv4:10.0.0.1")
    assert cap._enter("/W", b)[1] is None  # type: ignore[arg-type]
    assert cap.refused == 2 and cap.open == 3
