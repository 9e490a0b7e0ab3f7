#!/usr/bin/env python3
"""Per abuse class: what was sent, what came back, legitimate requests failed meanwhile, and the peak RSS
and fds of the scheduler and of the busiest agent. Prints a markdown table; asserts nothing.

A real scheduler and three ``sim`` agents (EMULATED NPU, time_scale 2) on loopback: the cluster
tests/integration/test_abuse.py attacks (``abuse_cluster`` in tests/helpers/abuse_clients.py: connection
cap 64, idle 3 s, age 8 s + 2 s grace, 100 streams per connection, 240 concurrent calls), so that each
class reaches its bound in seconds. One legitimate
client sends a raw 640x640 frame every 200 ms (10 s deadline) through the scheduler during each attack.

Then security round 2's probes (issue #45), on the same cluster with the DeepStack HTTP API on (an API
key, 256 connections at most): a PNG bomb inside the pixel bound, bytes that are not UTF-8 in the key, a
15 MiB field that used to come back echoed, keyless 16 MiB bodies, a connection flood on the HTTP port,
idle health Watch streams on the scheduler, and refused admin calls (their log lines counted).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/abuse.py
"""

from __future__ import annotations

import contextlib
import gzip
import secrets
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the shared test helpers: tests/helpers/

import grpc  # noqa: E402
import requests  # noqa: E402
from grpc_health.v1 import health_pb2, health_pb2_grpc  # noqa: E402
from helpers import abuse_clients as clients  # noqa: E402
from helpers import jpeg_bombs  # noqa: E402
from helpers.png_header import png_header  # noqa: E402

from npudure.proto import contract  # noqa: E402
from npudure.proto import inference_pb2 as pb  # noqa: E402
from npudure.proto import inference_pb2_grpc as rpc  # noqa: E402
from npudure_workshop.lab.local import LocalCluster, free_port  # noqa: E402

METRICS_PORT = free_port()


def _count(codes: list[str]) -> str:
    out: dict[str, int] = {}
    for code in codes:
        out[code] = out.get(code, 0) + 1
    return ", ".join(f"{n} {c}" for c, n in sorted(out.items(), key=lambda kv: -kv[1]))


def _frames(address: str, frame: bytes, count: int) -> list[str]:
    return [code for code, _ in clients.jpeg_frames(address, frame, count)]


def deadline_storm(c: LocalCluster) -> tuple[str, str]:
    codes = clients.storm(c.address, 12, 5.0, deadline_s=0.025)
    return "12 callers x 5 s, 25 ms deadline", ", ".join(f"{n} {k}" for k, n in codes.items())


def cancel_storm(c: LocalCluster) -> tuple[str, str]:
    codes = clients.storm(c.address, 12, 5.0, deadline_s=5.0, cancel_s=0.01)
    return "12 callers x 5 s, cancelled after 10 ms", ", ".join(f"{n} {k}" for k, n in codes.items())


def scan_bomb(c: LocalCluster) -> tuple[str, str]:
    bomb = jpeg_bombs.many_scans(2000)
    return f"20 x progressive JPEG, 2000 scans ({len(bomb) >> 10} KB)", _count(_frames(c.address, bomb, 20))


def segment_bomb(c: LocalCluster) -> tuple[str, str]:
    bomb = jpeg_bombs.many_segments(900_000)
    return f"20 x JPEG with 900k COM segments ({len(bomb) >> 20} MB)", _count(_frames(c.address, bomb, 20))


def gzip_bomb(c: LocalCluster) -> tuple[str, str]:
    bomb = gzip.compress(b"\0" * (4 << 20))
    codes = [s or "no status" for _ in range(4) for s in clients.gzip_bombs(c.address, bomb, 16)]
    return f"64 x gzip body ({len(bomb)} B inflating to 4 MiB)", _count(codes)


def unfinished(c: LocalCluster) -> tuple[str, str]:
    started = time.monotonic()
    stalled = clients.unfinished_streams(c.address, 1, 100, 64 << 10)
    ends: list[str] = []
    while time.monotonic() - started < 20 and not {"GOAWAY", "CLOSED"} & set(ends):
        ends += stalled.poll(0.5)
    stalled.close()
    took = time.monotonic() - started
    return (
        "100 calls on 1 connection, 64 KB of 3.9 MB each, then silence",
        f"connection closed after {took:.1f}s",
    )


def over_rpc_cap(c: LocalCluster) -> tuple[str, str]:
    agent = c.agents["board2"].address
    stalled = clients.unfinished_streams(agent, 3, 100, 64 << 10)
    stalled.poll(1.0)
    stalled.close()
    return "300 stalled calls to one agent (cap 240)", _count(stalled.statuses) or "none answered"


def slow_loris(c: LocalCluster) -> tuple[str, str]:
    sock, conn = clients.h2_connect(c.address)
    started = time.monotonic()
    conn.send_headers(1, clients.grpc_headers(c.address))
    conn.send_data(1, clients.length_prefix(1 << 20))
    with sock:
        while time.monotonic() - started < 25:
            try:
                conn.send_data(1, b"\2" * 5)
            except Exception:
                break
            events = clients.pump(sock, conn, 1.0)
            if any(e == "closed" or type(e).__name__ == "ConnectionTerminated" for e in events):
                break
    return "1 MB body sent at 5 B/s", f"cut after {time.monotonic() - started:.1f}s"


@contextlib.contextmanager
def _connections(host: str, port: int, count: int) -> Iterator[list[socket.socket]]:
    """``count`` TCP connections to host:port, held for the block and all closed after it."""
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(socket.create_connection((host, port), timeout=5)) for _ in range(count)]


def idle_sockets(c: LocalCluster) -> tuple[str, str]:
    host, _, port = c.agents["board3"].address.rpartition(":")
    with _connections(host, int(port), 300) as socks:
        started, closed = time.monotonic(), set()
        while len(closed) < len(socks) and time.monotonic() - started < 15:
            for i, sock in enumerate(socks):
                sock.setblocking(False)
                with contextlib.suppress(BlockingIOError):
                    try:
                        if sock.recv(4096) == b"":
                            closed.add(i)
                    except OSError:
                        closed.add(i)
            time.sleep(0.2)
    return (
        "300 idle TCP connections to an agent (cap 64)",
        f"{len(closed)} closed by the server in {time.monotonic() - started:.1f}s",
    )


def malformed(c: LocalCluster) -> tuple[str, str]:
    codes = []
    methods = [f"/{contract.CLUSTER}/{m.name}" for m in pb.DESCRIPTOR.services_by_name["Cluster"].methods]
    with grpc.insecure_channel(c.address) as channel:
        for _ in range(20):
            for method in [*methods, "/grpc.health.v1.Health/Check", contract.INFER_METHOD]:
                try:
                    channel.unary_unary(method)(b"\xff\xff\xff", timeout=5)
                    codes.append("OK")
                except grpc.RpcError as exc:
                    codes.append(exc.code().name)
    return f"{len(codes)} x 3 junk bytes on every unary RPC", _count(codes)


def metrics_http(c: LocalCluster) -> tuple[str, str]:
    pid = c.agents["board1"].pid
    with _connections("127.0.0.1", METRICS_PORT, 200):
        time.sleep(1.0)
        with open(f"/proc/{pid}/status") as status:
            threads = next(int(line.split()[1]) for line in status if line.startswith("Threads:"))
    return (
        "200 silent HTTP connections to an agent's metrics port",
        f"agent threads {threads} (8 served at once)",
    )


def metrics_stalled_heads(c: LocalCluster) -> tuple[str, str]:
    stalled = []
    for _ in range(8):
        sock = socket.create_connection(("127.0.0.1", METRICS_PORT), timeout=5)
        sock.sendall(b"GET /metrics HTTP/1.1\r\n")
        stalled.append(sock)
    scraped = 0
    for _ in range(30):
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", METRICS_PORT), 5) as sock:
            sock.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            scraped += b"process_open_fds" in b"".join(iter(lambda s=sock: s.recv(65536), b""))
    for sock in stalled:
        sock.close()
    return "8 sockets that send a request line and stop, 30 scrapes", f"{scraped}/30 scrapes served"


# ---------------------------------------------------------------------- security round 2 (#45)
API_KEY = secrets.token_urlsafe(24)  # made per run: no key lives in the repository
HTTP_MAX_CONNECTIONS = 256


_SESSIONS = threading.local()


def _post(c: LocalCluster, fields: dict[str, bytes], image: bytes | None) -> requests.Response:
    """One multipart post, on this thread's keep-alive session (as a camera client's)."""
    files: dict[str, tuple[str | None, bytes]] = {name: (None, value) for name, value in fields.items()}
    if image is not None:
        files["image"] = ("f.png", image)
    session = getattr(_SESSIONS, "session", None) or requests.Session()
    _SESSIONS.session = session
    return session.post(c.http_url, files=files, timeout=60)


def _many(count: int, workers: int, call: Callable[[], requests.Response]) -> str:
    with ThreadPoolExecutor(workers) as pool:
        replies = list(pool.map(lambda _i: call(), range(count)))
    return "HTTP " + _count([str(r.status_code) for r in replies])


def png_bomb(c: LocalCluster) -> tuple[str, str]:
    bomb = png_header(5760, 5760, 16, 6)  # 33 MP, inside the pixel bound; 265 MB once decoded
    answer = _many(48, 12, lambda: _post(c, {"api_key": API_KEY.encode()}, bomb))
    return "12 clients x 4 posts, a 5760x5760 16-bit RGBA PNG", answer


def not_utf8_key(c: LocalCluster) -> tuple[str, str]:
    logged = len(c.logs("scheduler"))
    answer = _many(3000, 16, lambda: _post(c, {"api_key": b"\xff\xfe\xfd"}, None))
    return (
        "3000 posts, api_key bytes not UTF-8",
        f"{answer}; scheduler log +{len(c.logs('scheduler')) - logged} B",
    )


def echoed_field(c: LocalCluster) -> tuple[str, str]:
    big = b"9" * (15 * 1024 * 1024)
    sizes: list[int] = []

    def post() -> requests.Response:
        reply = _post(c, {"api_key": API_KEY.encode(), "min_confidence": big}, None)
        sizes.append(len(reply.content))
        return reply

    answer = _many(32, 8, post)
    return "32 posts, a 15 MiB min_confidence", f"{answer}; longest answer {max(sizes)} B"


def keyless_bodies(c: LocalCluster) -> tuple[str, str]:
    body = b"\x00" * (16 * 1024 * 1024)
    return "128 keyless posts of 16 MiB, 32 at once", _many(128, 32, lambda: _post(c, {}, body))


def http_connection_flood(c: LocalCluster) -> tuple[str, str]:
    host, port = c.http_url.split("//")[1].split("/")[0].rsplit(":", 1)
    with _connections(host, int(port), 1000) as socks:
        time.sleep(1.0)
        refused, held = clients.refused_or_held(socks, 0.01)
    return f"1000 TCP connections at once to the HTTP port (cap {HTTP_MAX_CONNECTIONS})", (
        f"{refused} answered 503, {held} held open"
    )


def idle_watch_streams(c: LocalCluster) -> tuple[str, str]:
    channels = [grpc.insecure_channel(c.address) for _ in range(5)]
    calls = [
        health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(service=""))
        for channel in channels
        for _ in range(250)
    ]
    time.sleep(4.0)  # the legitimate client's frames go through meanwhile (its column)
    ended = [call.code().name for call in calls if call.done()]  # refused by the stream caps
    for call in calls:
        call.cancel()
    for channel in channels:
        channel.close()
    return "5 connections x 250 idle health Watch streams, 4 s", (
        f"{len(calls) - len(ended)} held, {_count(ended) or 'none refused'}"
    )


def refused_admin_calls(c: LocalCluster) -> tuple[str, str]:
    before = c.logs("scheduler").count("refused admin call")
    codes = []
    with grpc.insecure_channel(c.address) as channel:
        stub = rpc.ClusterStub(channel)
        for _ in range(2000):
            try:
                stub.SetPolicy(pb.SetPolicyRequest(policy="p2c"), timeout=5)
                codes.append("OK")
            except grpc.RpcError as exc:
                codes.append(exc.code().name)
    lines = c.logs("scheduler").count("refused admin call") - before
    return "2000 admin calls without credentials", f"{_count(codes)}; {lines} log lines"


ROUND_2 = [
    png_bomb,
    not_utf8_key,
    echoed_field,
    keyless_bodies,
    http_connection_flood,
    idle_watch_streams,
    refused_admin_calls,
]


CLASSES = [
    deadline_storm,
    cancel_storm,
    scan_bomb,
    segment_bomb,
    gzip_bomb,
    unfinished,
    over_rpc_cap,
    slow_loris,
    idle_sockets,
    malformed,
    metrics_http,
    metrics_stalled_heads,
]


def _cluster(key_file: Path) -> LocalCluster:
    """The abuse cluster (tests/helpers/abuse_clients.py) with the DeepStack HTTP API on, behind a key."""
    cluster = clients.abuse_cluster(METRICS_PORT)
    cluster.http_api = True
    api = {"api_key_file": str(key_file), "max_connections": HTTP_MAX_CONNECTIONS}
    cluster.scheduler_overrides = {**cluster.scheduler_overrides, "http_api": api}
    return cluster


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="npudure-abuse-") as tmp:
        key_file = Path(tmp) / "api-key"
        key_file.write_text(API_KEY + "\n")
        key_file.chmod(0o600)
        with _cluster(key_file) as c:
            _table(c, [*CLASSES, *ROUND_2])


def _table(c: LocalCluster, attacks: list[Callable[[LocalCluster], tuple[str, str]]]) -> None:
    pids = {"scheduler": c.scheduler.pid, **{n: p.pid for n, p in c.agents.items()}}
    header = "abuse | sent | answer | legit ok/failed (worst s) | boards after | peak RSS MiB / fds"
    print(f"| {header}: scheduler; busiest agent |")
    print("|---|---|---|---|---|---|")
    for attack in attacks:
        with clients.PeakSampler(pids) as peaks, clients.LegitProbe(c.address) as legit:
            sent, answer = attack(c)
        time.sleep(1.0)
        states = clients.board_states(c.address)
        up = "all UP" if set(states.values()) == {"UP"} else str(states)
        sched = peaks.peak["scheduler"]
        agent = max((peaks.peak[n] for n in c.agents), key=lambda u: u.rss_mib)
        name = attack.__name__.replace("_", " ")
        ok = f"{legit.served}/{len(legit.failures)} ({legit.worst_s:.2f})"
        peak = f"{sched.rss_mib:.0f} / {sched.fds}; {agent.rss_mib:.0f} / {agent.fds}"
        print(f"| {name} | {sent} | {answer} | {ok} | {up} | {peak} |", flush=True)


if __name__ == "__main__":
    main()
