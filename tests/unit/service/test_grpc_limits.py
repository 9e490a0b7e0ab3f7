"""The server limits as C-core options, and the connection count the cap's log line reads."""

from __future__ import annotations

from pathlib import Path

from npudure.config import ServerLimits
from npudure.service import grpc_limits

TCP = """  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:C383 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 1 1
   1: 0100007F:C383 0100007F:9C40 01 00000000:00000000 00:00000000 00000000  1000        0 2 1
   2: 0100007F:C383 0100007F:9C41 01 00000000:00000000 00:00000000 00000000  1000        0 3 1
   3: 0100007F:9C40 0100007F:C383 01 00000000:00000000 00:00000000 00000000  1000        0 4 1
   4: 0100007F:C383 0100007F:9C42 06 00000000:00000000 00:00000000 00000000  1000        0 5 1
"""


def test_inbound_connections_counts_established_ones_to_the_port(tmp_path: Path) -> None:
    (tmp_path / "tcp").write_text(TCP)
    (tmp_path / "tcp6").write_text(TCP.splitlines()[0] + "\n")
    # 0xC383 = 50051: two ESTABLISHED to it; the listener, TIME_WAIT and the outgoing end do not count.
    assert grpc_limits.inbound_connections(50051, tmp_path) == 2
    assert grpc_limits.inbound_connections(50052, tmp_path) == 0


def test_options_carry_every_limit() -> None:
    options = dict(grpc_limits.server_options(ServerLimits(max_connections=7), 1 << 20))
    assert options["grpc.max_allowed_incoming_connections"] == 7
    assert options["grpc.max_receive_message_length"] == 1 << 20
    assert options["grpc.compression_enabled_algorithms_bitset"] == 1  # identity only
    assert options["grpc.max_connection_idle_ms"] == 300_000
    assert options["grpc.max_connection_age_ms"] == 600_000
    assert options["grpc.http2.max_ping_strikes"] == 2
