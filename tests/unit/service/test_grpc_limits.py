"""The server limits as C-core options, and the connection count the cap's log line reads."""

from __future__ import annotations

from pathlib import Path

from npudure.board.meminfo import field_bytes
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


def _fd_dir(tmp_path: Path, sockets: int, files: int) -> Path:
    fd = tmp_path / "fd"
    fd.mkdir()
    for i in range(sockets):
        (fd / str(i)).symlink_to(f"socket:[{1000 + i}]")
    for i in range(files):
        (fd / str(sockets + i)).symlink_to("/dev/null")
    return fd


def test_socket_fds_counts_only_sockets(tmp_path: Path) -> None:
    assert grpc_limits.socket_fds(_fd_dir(tmp_path, sockets=3, files=4)) == 3
    assert grpc_limits.socket_fds(tmp_path / "absent") == 0


def test_the_tcp_table_is_read_only_when_this_process_could_be_at_the_cap(tmp_path: Path) -> None:
    net = tmp_path / "net"
    net.mkdir()
    (net / "tcp").write_text(TCP)  # two ESTABLISHED to 50051
    # Fewer sockets held than the cap: the cap cannot be reached, the costly table is not walked (it
    # would say 2 here, which a cap of 2 would count as reached).
    assert grpc_limits.connections_at_cap(50051, 2, _fd_dir(tmp_path, 1, 5), net) is None
    fd = tmp_path / "fd"
    (fd / "9").symlink_to("socket:[9]")
    assert grpc_limits.connections_at_cap(50051, 2, fd, net) == 2
    assert grpc_limits.connections_at_cap(50051, 3, fd, net) is None  # 2 sockets held: below a cap of 3


def test_options_carry_every_limit() -> None:
    options = dict(grpc_limits.server_options(ServerLimits(max_connections=7), 1 << 20))
    assert options["grpc.max_allowed_incoming_connections"] == 7
    assert options["grpc.max_receive_message_length"] == 1 << 20
    assert options["grpc.compression_enabled_algorithms_bitset"] == 1  # identity only
    assert options["grpc.max_connection_idle_ms"] == 300_000
    assert options["grpc.max_connection_age_ms"] == 600_000
    assert options["grpc.http2.max_ping_strikes"] == 2


MIB = 1 << 20


def test_a_big_host_keeps_the_queues_call_count() -> None:
    limits = ServerLimits()
    assert grpc_limits.call_cap(limits, 4 * MIB, 1048, mem_total=24 << 30) == 1048 + grpc_limits.CONTROL_CALLS


def test_a_small_board_caps_calls_at_its_memory_budget() -> None:
    """2 GiB, a quarter for bodies, 4 MiB each: 128 calls, not 194 (unfinished bodies <= 512 MiB)."""
    limits = ServerLimits()
    cap = grpc_limits.call_cap(limits, 4 * MIB, 66, mem_total=2 << 30)
    assert cap == 128 and cap * 4 * MIB <= (2 << 30) * limits.body_memory_fraction


def test_the_cap_never_falls_below_the_control_calls() -> None:
    assert (
        grpc_limits.call_cap(ServerLimits(), 64 * MIB, 1000, mem_total=1 << 30) == grpc_limits.CONTROL_CALLS
    )


def test_ram_is_read_from_meminfo(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24576000 kB\nMemFree: 1 kB\n")
    assert field_bytes("MemTotal", meminfo) == 24576000 * 1024
    assert field_bytes("MemTotal", tmp_path / "absent") is None
