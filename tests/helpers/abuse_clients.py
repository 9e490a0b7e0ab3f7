"""Hostile and careless clients for tests/integration/test_abuse.py and benchmarks/abuse.py.

Each attacker runs bounded in time against real servers on loopback; ``LegitProbe`` is the well-behaved
client whose failures during an attack are what the suite counts; ``usage`` reads a process's RSS and
open file descriptors from /proc.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import struct
import threading
import time
from dataclasses import dataclass, field

import grpc
import h2.config
import h2.connection
import h2.exceptions
import numpy as np

from npudure.proto import contract
from npudure.proto import inference_pb2 as pb
from npudure.proto import inference_pb2_grpc as rpc
from npudure_workshop.lab.local import LocalCluster

INFER = contract.INFER_METHOD
RAW_FRAME = np.random.default_rng(7).integers(0, 256, (640, 640, 3), dtype=np.uint8).tobytes()
RAW_REQUEST = pb.InferRequest(encoding=pb.ENCODING_RAW_RGB, frame=RAW_FRAME).SerializeToString()
BIG = contract.message_size_options(16 << 20)

# Limits lowered so each abuse class reaches its bound in seconds (the defaults are in
# npudure/config.py: ServerLimits); the suite and benchmarks/abuse.py measure the same cluster.
LIMITS = {
    "max_connections": 64,
    "max_streams_per_connection": 100,
    "max_concurrent_rpcs": 240,
    "max_connection_idle_s": 3.0,
    "max_connection_age_s": 8.0,
    "max_connection_age_grace_s": 2.0,
}


def abuse_cluster(metrics_port: int) -> LocalCluster:
    """The (not yet started) loopback cluster under attack: a scheduler and three ``sim`` agents
    (time_scale 2) with ``LIMITS``; board1 serves its metrics on ``metrics_port``."""
    return LocalCluster(
        boards=3,
        time_scale=2.0,
        agent_overrides={"limits": LIMITS},
        scheduler_overrides={"limits": LIMITS},
        per_board_overrides={"board1": {"metrics_port": metrics_port}},
    )


# ---------------------------------------------------------------------- measurement
@dataclass(frozen=True)
class Usage:
    rss_mib: float
    fds: int


def usage(pid: int) -> Usage:
    with open(f"/proc/{pid}/status") as status:
        rss_kib = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    return Usage(rss_kib / 1024, len(os.listdir(f"/proc/{pid}/fd")))


class PeakSampler:
    """Samples the RSS and fds of some processes every 50 ms in a thread; keeps the peaks."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.peak = {name: Usage(0.0, 0) for name in pids}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for name, pid in self.pids.items():
                with contextlib.suppress(OSError, StopIteration):
                    now, top = usage(pid), self.peak[name]
                    self.peak[name] = Usage(max(now.rss_mib, top.rss_mib), max(now.fds, top.fds))
            self._stop.wait(0.05)

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


# ---------------------------------------------------------------------- the legitimate client
@dataclass
class LegitProbe:
    """One well-behaved client: a raw frame every ``interval_s`` with a generous deadline, in a thread."""

    address: str
    interval_s: float = 0.2
    timeout_s: float = 10.0
    served: int = 0
    failures: list[str] = field(default_factory=list)
    worst_s: float = 0.0

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with grpc.insecure_channel(self.address, options=BIG) as channel:
            call = channel.unary_unary(INFER)
            while not self._stop.is_set():
                sent = time.monotonic()
                try:
                    pb.InferResponse.FromString(call(RAW_REQUEST, timeout=self.timeout_s))
                    self.served += 1
                except grpc.RpcError as exc:
                    self.failures.append(f"{exc.code().name}: {exc.details()}")
                self.worst_s = max(self.worst_s, time.monotonic() - sent)
                self._stop.wait(self.interval_s)

    def __enter__(self) -> LegitProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(self.timeout_s + 5)


def board_states(scheduler: str) -> dict[str, str]:
    with grpc.insecure_channel(scheduler) as channel:
        status = rpc.ClusterStub(channel).GetClusterStatus(pb.ClusterStatusRequest(), timeout=5)
    return {b.name: contract.board_state_label(b.state) for b in status.boards}


# ---------------------------------------------------------------------- deadline and cancel storms
async def _storm(
    address: str, concurrency: int, duration_s: float, deadline_s: float, cancel_s: float | None
):
    codes: dict[str, int] = {}
    async with grpc.aio.insecure_channel(address, options=BIG) as channel:
        call = channel.unary_unary(INFER)
        stop_at = time.monotonic() + duration_s

        async def one() -> None:
            while time.monotonic() < stop_at:
                pending = call(RAW_REQUEST, timeout=deadline_s)
                try:
                    if cancel_s is None:
                        await pending
                        code = "OK"
                    else:
                        await asyncio.sleep(cancel_s)
                        pending.cancel()
                        code = "CANCELLED"
                        with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
                            await pending
                except grpc.aio.AioRpcError as exc:
                    code = exc.code().name
                codes[code] = codes.get(code, 0) + 1

        await asyncio.gather(*(one() for _ in range(concurrency)))
    return codes


def storm(
    address: str,
    concurrency: int,
    duration_s: float,
    deadline_s: float = 0.025,
    cancel_s: float | None = None,
) -> dict[str, int]:
    """Calls with a short deadline (or cancelled after ``cancel_s``) in a closed loop; codes seen."""
    return asyncio.run(_storm(address, concurrency, duration_s, deadline_s, cancel_s))


def jpeg_frames(address: str, frame: bytes, count: int) -> list[tuple[str, str]]:
    """``count`` Infer calls of one JPEG ``frame`` (a decode bomb, say), one after another; each call's
    code name and details ("" when OK)."""
    request = pb.InferRequest(encoding=pb.ENCODING_JPEG, frame=frame).SerializeToString()
    replies = []
    with grpc.insecure_channel(address, options=BIG) as channel:
        call = channel.unary_unary(INFER)
        for _ in range(count):
            try:
                call(request, timeout=10)
                replies.append(("OK", ""))
            except grpc.RpcError as exc:
                replies.append((exc.code().name, exc.details() or ""))
    return replies


# ---------------------------------------------------------------------- raw HTTP/2 (h2 over a socket)
def h2_connect(address: str, timeout_s: float = 5.0) -> tuple[socket.socket, h2.connection.H2Connection]:
    host, _, port = address.rpartition(":")
    sock = socket.create_connection((host, int(port)), timeout=timeout_s)
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
    conn.initiate_connection()
    sock.sendall(conn.data_to_send())
    return sock, conn


def grpc_headers(address: str, path: str = INFER, extra: tuple[tuple[str, str], ...] = ()) -> list:
    return [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", path),
        (":authority", address),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
        *extra,
    ]


def length_prefix(size: int, compressed: bool = False) -> bytes:
    return struct.pack(">BI", int(compressed), size)


def pump(sock: socket.socket, conn: h2.connection.H2Connection, wait_s: float = 0.0) -> list:
    """Send what h2 has queued, then read events for up to ``wait_s``."""
    events: list = []
    data = conn.data_to_send()
    if data:
        sock.sendall(data)
    end = time.monotonic() + wait_s
    while True:
        left = end - time.monotonic()
        if left <= 0:
            break
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            break
        except OSError:
            events.append("closed")
            break
        if not chunk:
            events.append("closed")
            break
        try:
            events.extend(conn.receive_data(chunk))
        except h2.exceptions.ProtocolError:  # frames after the server's GOAWAY
            events.append("closed")
            break
        out = conn.data_to_send()
        if out:
            with contextlib.suppress(OSError):
                sock.sendall(out)
    return events


def grpc_status(events: list) -> str | None:
    """The grpc-status of the first stream that ended in ``events`` (as a code name), else None."""
    import h2.events

    for event in events:
        if isinstance(event, h2.events.ResponseReceived | h2.events.TrailersReceived):
            headers = dict(event.headers)
            if "grpc-status" in headers:
                return grpc.StatusCode(
                    next(c for c in grpc.StatusCode if c.value[0] == int(headers["grpc-status"]))
                ).name
        if isinstance(event, h2.events.StreamReset):
            return "RST_STREAM"
        if isinstance(event, h2.events.ConnectionTerminated):
            return "GOAWAY"
        if event == "closed":
            return "CLOSED"
    return None


def stream_status(events: list, sid: int) -> str | None:
    """The grpc-status stream ``sid`` ended with in ``events`` (as a code name), else None."""
    import h2.events

    for event in events:
        headers = dict(getattr(event, "headers", None) or ())
        if isinstance(event, h2.events.ResponseReceived | h2.events.TrailersReceived) and (
            event.stream_id == sid and "grpc-status" in headers
        ):
            code = int(headers["grpc-status"])
            return next(c.name for c in grpc.StatusCode if c.value[0] == code)
    return None


def gzip_bombs(address: str, bomb: bytes, streams: int) -> list[str | None]:
    """``streams`` calls on one connection, each a gzip-compressed message ``bomb``; the status each
    call ended with (None: none within 2 s). A server that inflated them would be the one harmed."""
    sock, conn = h2_connect(address)
    with sock:
        pump(sock, conn, 0.1)
        sids = []
        for _ in range(streams):
            sid = conn.get_next_available_stream_id()
            conn.send_headers(sid, grpc_headers(address, extra=(("grpc-encoding", "gzip"),)))
            conn.send_data(sid, length_prefix(len(bomb), compressed=True) + bomb, end_stream=True)
            sids.append(sid)
        events = pump(sock, conn, 2.0)
    return [stream_status(events, sid) for sid in sids]


@dataclass
class Unfinished:
    """Connections whose calls promise a message (``promised`` bytes) and never finish it."""

    connections: list[tuple[socket.socket, h2.connection.H2Connection]] = field(default_factory=list)
    statuses: list[str] = field(default_factory=list)

    def close(self) -> None:
        for sock, _ in self.connections:
            sock.close()

    def poll(self, wait_s: float) -> list[str]:
        """Statuses (or GOAWAY/CLOSED) the server sent meanwhile, on every connection."""
        seen = []
        for sock, conn in self.connections:
            seen.extend(_ends(pump(sock, conn, wait_s / max(1, len(self.connections)))))
        self.statuses.extend(seen)
        return seen


def _ends(events: list) -> list[str]:
    import h2.events

    out = []
    for event in events:
        if isinstance(event, h2.events.ResponseReceived | h2.events.TrailersReceived):
            status = dict(event.headers).get("grpc-status")
            if status is not None:
                out.append(next(c.name for c in grpc.StatusCode if c.value[0] == int(status)))
        elif isinstance(event, h2.events.StreamReset):
            out.append("RST_STREAM")
        elif isinstance(event, h2.events.ConnectionTerminated):
            out.append("GOAWAY")
        elif event == "closed":
            out.append("CLOSED")
    return out


def unfinished_streams(
    address: str, connections: int, streams: int, body_bytes: int, promised: int = 3_900_000
) -> Unfinished:
    """Open ``connections`` x ``streams`` Infer calls, each sending ``body_bytes`` of a ``promised``-byte
    message (as far as flow control lets it), then stop sending: a stalled upload."""
    import h2.exceptions

    attack = Unfinished()
    for _ in range(connections):
        sock, conn = h2_connect(address)
        attack.connections.append((sock, conn))
        attack.statuses.extend(_ends(pump(sock, conn, 0.1)))
        for _ in range(streams):
            sid = conn.get_next_available_stream_id()
            try:
                conn.send_headers(sid, grpc_headers(address))
                conn.send_data(sid, length_prefix(promised))
                sent = 0
                while sent < body_bytes:
                    n = min(conn.local_flow_control_window(sid), 16384, body_bytes - sent)
                    if n <= 0:
                        attack.statuses.extend(_ends(pump(sock, conn, 0.05)))
                        if conn.local_flow_control_window(sid) <= 0:
                            break
                        continue
                    conn.send_data(sid, b"\1" * n)
                    sent += n
            except h2.exceptions.TooManyStreamsError:
                raise  # the server's SETTINGS_MAX_CONCURRENT_STREAMS, honoured by h2
            except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError):
                pass
            attack.statuses.extend(_ends(pump(sock, conn, 0.0)))
    return attack


def refused_or_held(socks: list[socket.socket], wait_s: float) -> tuple[int, int]:
    """Of connections opened to a capped HTTP port: how many were answered 503 (refused) and how many
    got nothing within ``wait_s`` each (accepted and held); one closed otherwise counts as neither."""
    refused = held = 0
    for sock in socks:
        sock.settimeout(wait_s)
        try:
            refused += sock.recv(64).startswith(b"HTTP/1.1 503")
        except TimeoutError:
            held += 1
        except OSError:
            pass
    return refused, held
