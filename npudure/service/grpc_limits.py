"""What one client may hold on the agent's and the scheduler's gRPC servers: the one place for the limits.

gRPC C-core (1.85) gives, per server:
- ``grpc.max_allowed_incoming_connections``: connections beyond it are closed on accept (fds freed);
  C-core says nothing when it happens, so :func:`watch_connections` logs it.
- ``grpc.max_concurrent_streams``: advertised in SETTINGS; a client cannot open more calls on one
  connection.
- ``maximum_concurrent_rpcs`` (grpc.aio): calls being received or handled at once, all connections
  together; beyond it RESOURCE_EXHAUSTED. With ``grpc.max_receive_message_length`` it bounds the bytes
  held in requests, complete or not: max_concurrent_rpcs x max_message_bytes.
- ``grpc.max_connection_idle_ms``: a connection with no call is closed (GOAWAY).
- ``grpc.max_connection_age_ms`` + ``_grace_ms``: every connection is closed after its age (C-core adds
  +/-10% jitter) and a grace for its calls. There is no per-stream body timeout in gRPC: this is what
  bounds a request body that stops arriving (a slow loris), together with the stream and RPC caps.
- ``grpc.compression_enabled_algorithms_bitset`` = identity only: a gzip (or deflate) request is
  refused (UNIMPLEMENTED) before it is inflated, so 4 KB on the wire cannot become 4 MB in memory.
- keepalive enforcement: pings more often than every 500 ms without data are strikes; after two the
  connection gets GOAWAY ``too_many_pings`` (proxyless clients ping every second).
The resource quota (``grpc.resource_quota``) is a C pointer that grpcio does not expose to Python.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path

import grpc

from npudure.board import meminfo
from npudure.config import ServerLimits
from npudure.proto import contract
from npudure.service.decoding import StrictDecoding, quiet_call_ended_errors
from npudure.service.stream_cap import StreamCap

log = logging.getLogger(__name__)

IDENTITY_ONLY = 1  # bit 0 = GRPC_COMPRESS_NONE in grpc_compression_algorithm
KEEPALIVE_ENFORCEMENT = (
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 500),
    ("grpc.http2.max_ping_strikes", 2),
)
# A connection must finish its TLS handshake (and send the HTTP/2 preface) within this (default 120 s).
HANDSHAKE_TIMEOUT_MS = 10_000
# Calls beyond the request queue that a server always needs room for: health checks, status polls,
# health watches of proxyless clients, admin calls.
CONTROL_CALLS = 128


def server_options(limits: ServerLimits, max_message_bytes: int) -> list[tuple[str, int]]:
    return [
        *contract.message_size_options(max_message_bytes),
        ("grpc.max_allowed_incoming_connections", limits.max_connections),
        ("grpc.max_concurrent_streams", limits.max_streams_per_connection),
        ("grpc.max_connection_idle_ms", round(limits.max_connection_idle_s * 1000)),
        ("grpc.max_connection_age_ms", round(limits.max_connection_age_s * 1000)),
        ("grpc.max_connection_age_grace_ms", round(limits.max_connection_age_grace_s * 1000)),
        ("grpc.compression_enabled_algorithms_bitset", IDENTITY_ONLY),
        ("grpc.server_handshake_timeout_ms", HANDSHAKE_TIMEOUT_MS),
        *KEEPALIVE_ENFORCEMENT,
    ]


def call_cap(
    limits: ServerLimits, max_message_bytes: int, request_queue: int, mem_total: int | None = None
) -> int:
    """Calls at once when the config names none: the request queue plus CONTROL_CALLS, but no more
    than the memory budget's worth of bodies (``limits.body_memory_fraction`` of the host's RAM /
    ``max_message_bytes``): unfinished bodies then hold at most the budget, not calls x message size
    (390 MB promised and never sent grew a scheduler by 346 MiB), on a 2 GiB board as on a server.
    Never below CONTROL_CALLS: control calls carry small messages."""
    wanted = request_queue + CONTROL_CALLS
    total = mem_total if mem_total is not None else meminfo.field_bytes("MemTotal")
    if total is None:
        return wanted
    by_memory = int(total * limits.body_memory_fraction) // max(1, max_message_bytes)
    if by_memory < wanted:
        log.warning(
            "calls at once capped at %d (not %d): %.0f%% of this host's %d MiB RAM holds that many "
            "%d MiB bodies (limits.body_memory_fraction; or set limits.max_concurrent_rpcs)",
            max(CONTROL_CALLS, by_memory),
            wanted,
            limits.body_memory_fraction * 100,
            total >> 20,
            max_message_bytes >> 20,
        )
    return max(CONTROL_CALLS, min(wanted, by_memory))


def server(
    limits: ServerLimits,
    max_message_bytes: int,
    request_queue: int,
    options: Sequence[tuple[str, object]] = (),
    interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
) -> grpc.aio.Server:
    """A grpc.aio server with the limits, and malformed requests answered INVALID_ARGUMENT.

    ``options`` come first and ours override them (C-core keeps the last value of a repeated key).
    """
    concurrent = limits.max_concurrent_rpcs or call_cap(limits, max_message_bytes, request_queue)
    quiet_call_ended_errors()
    return grpc.aio.server(
        options=[*options, *server_options(limits, max_message_bytes)],
        # The stream cap first: a refused stream costs no decoding and no peer check.
        interceptors=(StreamCap(limits), *interceptors, StrictDecoding()),
        maximum_concurrent_rpcs=concurrent,
    )


def inbound_connections(port: int, proc_net: Path = Path("/proc/net")) -> int:
    """ESTABLISHED TCP connections to local ``port`` (IPv4 and IPv6), from /proc/net/tcp{,6}.

    Costly whatever the count: the kernel walks its whole established-connection hash table to write
    these files (262,144 buckets on this 24 GiB host: ~11 ms of CPU for both), so it is read only when
    :func:`socket_fds` says the cap may be reached."""
    count = 0
    hex_port = f":{port:04X}"
    for name in ("tcp", "tcp6"):
        try:
            lines = (proc_net / name).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split(None, 4)
            if len(fields) > 3 and fields[1].endswith(hex_port) and fields[3] == "01":
                count += 1
    return count


def socket_fds(proc_fd: Path = Path("/proc/self/fd")) -> int:
    """Sockets this process holds open: an upper bound of its inbound connections, for the cost of a
    readlink per open file (each accepted connection is one of this process's socket fds)."""
    count = 0
    try:
        entries = list(proc_fd.iterdir())
    except OSError:
        return 0
    for entry in entries:
        with contextlib.suppress(OSError):  # closed since the listing
            count += os.readlink(entry).startswith("socket:")
    return count


def connections_at_cap(
    port: int, cap: int, proc_fd: Path = Path("/proc/self/fd"), proc_net: Path = Path("/proc/net")
) -> int | None:
    """The inbound connections to ``port`` when they have reached ``cap``, else None; the kernel's
    table is walked only when this process holds at least ``cap`` sockets."""
    if socket_fds(proc_fd) < cap:
        return None
    count = inbound_connections(port, proc_net)
    return count if count >= cap else None


async def watch_connections(port: int, limits: ServerLimits, interval_s: float = 1.0) -> None:
    """Log a warning (at most once a minute) while the connection cap is reached: C-core closes the
    connections beyond it without a word."""
    last = 0.0
    while True:
        await asyncio.sleep(interval_s)
        count = await asyncio.to_thread(connections_at_cap, port, limits.max_connections)
        if count is not None and time.monotonic() - last > 60:
            last = time.monotonic()
            log.warning(
                "%d connections to port %d: the cap (limits.max_connections = %d) is reached; new "
                "connections are closed on accept until some close (idle ones go after %.0fs)",
                count,
                port,
                limits.max_connections,
                limits.max_connection_idle_s,
            )
