#!/usr/bin/env python3
"""Forwarding cost of the NPUDure scheduler next to nginx ``grpc_pass`` and proxyless clients: prints
figures, asserts nothing.

Same run, same agents, same 1.2 MB raw frames, same load generator:

1. forwarding capacity (req/s, closed loop at saturation) and the proxy's CPU-ms per request,
   for the scheduler, for nginx (``least_conn``, one worker), proxyless (the generator's gRPC channel
   balances over the boards itself from the scheduler's ``GetRoute``: weighted_round_robin + ORCA,
   no proxy), and straight to the agents (round robin over the addresses by hand: the ceiling the
   generator and agents allow);
2. latency the proxy adds at concurrency 1 (p50/p99 via the proxy minus direct), targets interleaved;
3. routing decision time: each policy's choose() + in-flight bookkeeping on N boards, and the
   ``route_us`` / ``scheduler_queue_us`` the scheduler reports in its responses.

The agents run the ``sim`` backend (EMULATED NPU) with a tiny time_scale, so the NPU is never the
bottleneck; the network path (real gRPC over loopback sockets) is real. The load generator runs in its
own process. By default the proxy under test is pinned to CPU 0 and the generator and agents to the
others (``--pinning split``), so each proxy is measured on one core, as nginx runs one worker. Other
processes on the machine are not moved: the report shows how much CPU they took and how long the
proxy waited for its CPU.

    .venv/bin/python benchmarks/forwarding.py --duration 5 --repetitions 3 --out build/forwarding.json
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import itertools
import json
import multiprocessing
import multiprocessing.connection
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from npudure.bench import fmt as bench_fmt
from npudure.bench.cpu import host_cpu_busy_s, process_cpu_s
from npudure.lab.local import free_port
from npudure.proto import contract
from npudure.service.runtime import MALLOC_TUNING

FRAME_SHAPE = (640, 640, 3)
SATURATED = 0.90  # a process busy more than this fraction of its core is the bottleneck
STARVED = 0.25  # runnable without a CPU this fraction of the time: contention distorts its figures
TARGET_CAPACITY_RATIO = 1.0  # the targets
TARGET_ADDED_P50_MS = 1.0
CLIENT_CONNECTIONS = 2  # generator -> each target address (separate TCP connections)
NO_PROXY = ("direct", "proxyless")  # paths without a proxy process: no proxy CPU to meter
TARGET_PROXYLESS_VS_DIRECT = 0.98
TARGET_PROXYLESS_ADDED_P50_MS = 0.1


# ====================================================================== CPU accounting and pinning
def proc_cpu_s(pid: int) -> float:
    """utime + stime of a whole process (all threads), in seconds; 0 if it is gone."""
    return process_cpu_s(pid) or 0.0


def proc_wait_s(pid: int) -> float:
    """Time the threads of a process spent runnable but waiting for a CPU (schedstat run_delay)."""
    total = 0
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError, IndexError, ValueError):
                total += int((task / "schedstat").read_text().split()[1])
    return total / 1e9


def host_busy_s() -> float:
    """Busy CPU seconds of the whole host since boot (all cores), from /proc/stat."""
    busy = host_cpu_busy_s()
    return busy[0] if busy else 0.0


def children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError):
                stat = (entry / "stat").read_text()
                if int(stat[stat.rfind(")") + 2 :].split()[1]) == pid:
                    found.append(int(entry.name))
    return found


def pin(pids: Iterable[int], cpus: set[int]) -> None:
    """Pin every thread of each process: sched_setaffinity(pid) alone moves only the main thread."""
    for pid in pids:
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{pid}/task").iterdir():
                with contextlib.suppress(OSError):
                    os.sched_setaffinity(int(task.name), cpus)


@dataclass
class Meter:
    """CPU seconds of named process groups and of the host, between two marks."""

    groups: dict[str, list[int]]
    _start: dict[str, float] = field(default_factory=dict)

    def _read(self) -> dict[str, float]:
        t = os.times()
        out = {name: sum(proc_cpu_s(p) for p in pids) for name, pids in self.groups.items()}
        out |= {f"{name}_wait": sum(proc_wait_s(p) for p in pids) for name, pids in self.groups.items()}
        out["harness"] = t.user + t.system
        out["host"] = host_busy_s()
        out["wall"] = time.perf_counter()
        return out

    def start(self) -> None:
        self._start = self._read()

    def stop(self) -> dict[str, float]:
        end = self._read()
        delta = {k: end[k] - self._start[k] for k in end}
        ours = sum(v for k, v in delta.items() if k not in ("host", "wall") and not k.endswith("_wait"))
        delta["others"] = max(0.0, delta["host"] - ours)  # other processes on a shared machine
        return delta


# ====================================================================== the load generator (child)
class _Generator:
    """Runs in its own process: raw-bytes unary calls, no protobuf work per request."""

    def __init__(self, conn: multiprocessing.connection.Connection) -> None:
        import grpc

        self.grpc = grpc
        self.conn = conn
        rng = np.random.default_rng(0)
        frame = rng.integers(0, 256, FRAME_SHAPE, dtype=np.uint8).tobytes()
        from npudure.proto import inference_pb2 as pb

        self.pb = pb
        self.payload = pb.InferRequest(encoding=pb.ENCODING_RAW_RGB, frame=frame).SerializeToString()
        self.channels: list[Any] = []
        self.calls: dict[str, list[Any]] = {}
        self.rr: dict[str, Iterable[int]] = {}

    async def open(
        self, targets: dict[str, list[str]], proxyless: tuple[str, list[tuple[str, Any]]] | None = None
    ) -> dict[str, Any]:
        grpc = self.grpc
        options = [
            *contract.message_size_options(16 << 20),
            ("grpc.use_local_subchannel_pool", 1),  # one TCP connection per channel
        ]
        plans = {name: [(a, options) for a in addresses] for name, addresses in targets.items()}
        if proxyless:
            # One multi-address target with the scheduler's service config: gRPC picks the board.
            plans["proxyless"] = [(proxyless[0], proxyless[1])]
        for name, plan in plans.items():
            calls = []
            for address, opts in plan:
                for _ in range(CLIENT_CONNECTIONS):
                    channel = grpc.aio.insecure_channel(address, options=opts)
                    self.channels.append(channel)
                    calls.append(channel.unary_unary(contract.INFER_METHOD))
            self.calls[name], self.rr[name] = calls, itertools.count()
        await asyncio.wait_for(asyncio.gather(*(c.channel_ready() for c in self.channels)), 15)
        return {"payload_bytes": len(self.payload)}

    def _next(self, target: str):
        calls = self.calls[target]
        return calls[next(self.rr[target]) % len(calls)]  # type: ignore[call-overload]

    async def closed(
        self, target: str, concurrency: int, warmup_s: float, duration_s: float
    ) -> dict[str, Any]:
        grpc, payload = self.grpc, self.payload
        done: list[float] = []
        latencies: list[tuple[float, float]] = []
        replies: list[tuple[float, bytes]] = []
        errors: Counter[str] = Counter()
        keep = target == "scheduler"
        stop = False

        async def worker() -> None:
            while not stop:
                sent = time.perf_counter()
                try:
                    reply = await self._next(target)(payload, timeout=30)
                except grpc.aio.AioRpcError as exc:
                    errors[f"{exc.code().name}: {exc.details()}"] += 1
                    await asyncio.sleep(0.01)  # a dead target is not spun on at full speed
                    continue
                now = time.perf_counter()
                done.append(now)
                latencies.append((sent, now - sent))
                if keep:
                    replies.append((sent, reply))

        tasks = [asyncio.create_task(worker()) for _ in range(concurrency)]
        try:
            await asyncio.sleep(warmup_s)
            start = time.perf_counter()
            self.conn.send(("mark", "start"))
            await asyncio.sleep(duration_s)
            end = time.perf_counter()
            self.conn.send(("mark", "end"))
            stop = True
            await asyncio.wait_for(asyncio.gather(*tasks), 35)
        finally:
            stop = True
            for task in tasks:
                task.cancel()
        completed = sum(1 for t in done if start <= t < end)
        in_window = [lat for sent, lat in latencies if start <= sent < end]
        return {
            "completed": completed,
            "window_s": end - start,
            "latency_ms": [x * 1e3 for x in in_window],
            "inband": self._inband([r for sent, r in replies if start <= sent < end]),
            "errors": dict(errors),
        }

    async def latency(self, targets: list[str], duration_s: float, block: int) -> dict[str, Any]:
        """Concurrency 1; targets take turns in blocks of ``block`` requests, the order rotating."""
        payload = self.payload
        samples: dict[str, list[float]] = {t: [] for t in targets}
        replies: list[bytes] = []
        errors: Counter[str] = Counter()
        for target in targets:  # warm each path (connections, upstream keepalive pools)
            for _ in range(10):
                await self._next(target)(payload, timeout=30)
        order = list(targets)
        end = time.perf_counter() + duration_s
        while time.perf_counter() < end:
            for target in order:
                for _ in range(block):
                    call = self._next(target)
                    sent = time.perf_counter()
                    try:
                        reply = await call(payload, timeout=30)
                    except self.grpc.aio.AioRpcError as exc:
                        errors[f"{target}: {exc.code().name}: {exc.details()}"] += 1
                        continue
                    samples[target].append((time.perf_counter() - sent) * 1e3)
                    if target == "scheduler":
                        replies.append(reply)
            order = order[1:] + order[:1]
        return {"latency_ms": samples, "inband": self._inband(replies), "errors": dict(errors)}

    def _inband(self, replies: list[bytes]) -> dict[str, list[int]]:
        """The scheduler's own account of each request (parsed after the run, off the measured path)."""
        out: dict[str, list[int]] = {
            "route_us": [],
            "scheduler_queue_us": [],
            "network_to_board_us": [],
            "scheduler_total_us": [],
        }
        for raw in replies:
            timing = self.pb.InferResponse.FromString(raw).timing
            for key, values in out.items():
                values.append(getattr(timing, key))
        return out

    async def serve(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                # Wait for the next command off the event loop, so open channels keep being serviced.
                command, *params = await loop.run_in_executor(None, self.conn.recv)
                if command == "quit":
                    return
                try:
                    reply = await getattr(self, command)(*params)
                    self.conn.send(("ok", reply))
                except Exception as exc:
                    self.conn.send(("error", f"{type(exc).__name__}: {exc}"))
        finally:
            for channel in self.channels:
                await channel.close()


def _generator_main(conn: multiprocessing.connection.Connection, cpus: list[int] | None) -> None:
    if cpus:
        os.sched_setaffinity(0, set(cpus))  # before gRPC starts its threads: they inherit the mask
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and tells us to quit
    asyncio.run(_Generator(conn).serve())


class Generator:
    """The parent's handle on the generator process; every wait is bounded."""

    def __init__(self, cpus: set[int] | None) -> None:
        ctx = multiprocessing.get_context("spawn")  # grpc must not be inherited across fork
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(
            target=_generator_main, args=(child, sorted(cpus) if cpus else None), daemon=True
        )
        self.process.start()

    @property
    def pid(self) -> int:
        assert self.process.pid is not None
        return self.process.pid

    def _recv(self, timeout_s: float) -> tuple[str, Any]:
        deadline = time.monotonic() + timeout_s
        # Short polls: a signal that lands on another thread is handled at the next wake-up.
        while not self.conn.poll(0.2):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the load generator did not answer within {timeout_s:.0f}s")
            if not self.process.is_alive():
                raise RuntimeError(f"the load generator exited with code {self.process.exitcode}")
        return self.conn.recv()

    def call(
        self, command: str, *params: Any, timeout_s: float = 60.0, on_mark: Callable | None = None
    ) -> Any:
        self.conn.send((command, *params))
        while True:
            kind, value = self._recv(timeout_s)
            if kind == "mark" and on_mark:
                on_mark(value)
            elif kind == "ok":
                return value
            elif kind == "error":
                raise RuntimeError(f"load generator: {value}")

    def stop(self) -> None:
        """Ask it to close its channels; a generator still busy with a run (we were interrupted) is
        terminated instead of waited for."""
        with contextlib.suppress(OSError, BrokenPipeError):
            self.conn.send(("quit",))
        self.process.join(2)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5)


# ====================================================================== nginx, the peer
def nginx_version(binary: str) -> tuple[int, ...] | None:
    try:
        out = subprocess.run([binary, "-v"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"nginx/(\d+)\.(\d+)\.(\d+)", out.stderr + out.stdout)
    return tuple(int(x) for x in match.groups()) if match else None


def _die_with_parent_hook() -> Callable[[], None] | None:
    """A preexec_fn that has the child SIGTERMed if this harness dies without its finally blocks
    (SIGKILL). Resolved here, in the parent: the forked child only calls it, no imports there."""
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return lambda: prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


def nginx_config(
    prefix: Path, address: str, agents: Sequence[str], keepalive: int, version: tuple[int, ...]
) -> str:
    """nginx.conf for the peer: one worker (the scheduler is one process), least_conn, gRPC over h2c."""
    # `listen ... http2` until 1.25.0; from 1.25.1 on, `http2 on;` replaces it (the old form warns).
    new_syntax = version >= (1, 25, 1)
    listen = f"listen {address};\n        http2 on;" if new_syntax else f"listen {address} http2;"
    servers = "\n".join(f"        server {a};" for a in agents)
    temps = "\n".join(
        f"    {k}_temp_path {prefix}/{k}_temp;" for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    return f"""# generated by benchmarks/forwarding.py
worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
{temps}
    # Keep client and upstream connections for the whole run (the defaults close them every 1000 requests).
    keepalive_requests 1000000;
    keepalive_timeout 600s;
    upstream npudure_agents {{
        least_conn;
{servers}
        keepalive {keepalive};
        keepalive_requests 1000000;
        keepalive_timeout 600s;
    }}
    server {{
        {listen}
        client_max_body_size 8m;
        client_body_buffer_size 2m;
        location / {{
            grpc_pass grpc://npudure_agents;
            grpc_read_timeout 60s;
            grpc_send_timeout 60s;
        }}
    }}
}}
"""


class Nginx:
    """Our own nginx process: generated config in a temp dir, one worker, ``least_conn`` to the agents."""

    def __init__(self, binary: str, version: tuple[int, ...], agents: list[str], keepalive: int) -> None:
        self.binary, self.version, self.agents, self.keepalive = binary, version, agents, keepalive
        self._tmp = tempfile.TemporaryDirectory(prefix="npudure-nginx-")
        self.prefix = Path(self._tmp.name)
        self.prefix.chmod(0o755)  # run as root, nginx's workers run as nobody and must reach the dir
        self.port = free_port()
        self.process: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def config(self) -> str:
        return nginx_config(self.prefix, self.address, self.agents, self.keepalive, self.version)

    def start(self, timeout_s: float = 15.0) -> None:
        conf = self.prefix / "nginx.conf"
        conf.write_text(self.config())
        base = [self.binary, "-e", str(self.prefix / "error.log"), "-p", f"{self.prefix}/", "-c", str(conf)]
        check = subprocess.run([*base, "-t"], capture_output=True, text=True, timeout=timeout_s)
        if check.returncode != 0:
            raise RuntimeError(f"nginx rejected the generated config {conf}:\n{check.stderr.strip()}")
        log = (self.prefix / "stdout.log").open("ab")
        self.process = subprocess.Popen(
            [*base, "-g", "daemon off;"],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent_hook(),
        )
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"nginx exited with code {self.process.returncode}: {self.errors()}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 0.5):
                if self.workers():
                    return
            time.sleep(0.05)
        raise TimeoutError(f"nginx did not listen on {self.address} within {timeout_s:.0f}s: {self.errors()}")

    def workers(self) -> list[int]:
        return children_of(self.process.pid) if self.process else []

    def pids(self) -> list[int]:
        return [self.process.pid, *self.workers()] if self.process else []

    def errors(self) -> str:
        path = self.prefix / "error.log"
        return path.read_text(errors="replace").strip()[-2000:] if path.exists() else ""

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()  # SIGTERM: fast shutdown of master and workers
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self._tmp.cleanup()


# ====================================================================== routing decision microbenchmark
def routing_microbench(board_counts: Sequence[int], iterations: int) -> list[dict[str, Any]]:
    """µs per decision: the dispatcher's candidate filter + policy.choose() + in-flight increment,
    and the matching decrement when a request in flight completes (oldest first, about half the
    slots busy). Also the real Dispatcher reserve + release, Prometheus gauges included."""
    import random

    from npudure.config import SchedulerConfig
    from npudure.proto import inference_pb2 as pb
    from npudure.scheduler.boards import Board
    from npudure.scheduler.dispatch import Dispatcher
    from npudure.scheduler.metrics import SchedulerMetrics
    from npudure.scheduler.policies import POLICIES

    def make_boards(n: int) -> list[Board]:
        rng = random.Random(n)
        boards = [Board(i, f"board{i + 1}", f"127.0.0.1:{50051 + i}", 16) for i in range(n)]
        for b in boards:
            b.ewma_service_s = rng.uniform(0.010, 0.016)
            b.last_status = pb.NodeStatus(
                npu_cores=2, in_flight=rng.randint(0, 2), queue_depth=rng.randint(0, 3)
            )
        return boards

    rows = []
    for n in board_counts:
        for name, cls in POLICIES.items():
            boards, policy = make_boards(n), cls()
            held: collections.deque[Any] = collections.deque()
            depth = n * 8  # half of 16 slots per board

            def decide(boards=boards, policy=policy, held=held, depth=depth) -> None:
                candidates = [b for b in boards if b.eligible and b.in_flight < b.max_in_flight]
                board = policy.choose(candidates)
                board.in_flight += 1
                held.append(board)
                if len(held) > depth:
                    held.popleft().in_flight -= 1

            rows.append({"what": f"policy {name}", "boards": n, **_time_it(decide, iterations)})
        boards = make_boards(n)
        config = SchedulerConfig(
            boards=[{"name": b.name, "address": b.address} for b in boards], policy="least_inflight"
        )
        dispatcher = Dispatcher(boards, config, SchedulerMetrics())
        held2: collections.deque[Any] = collections.deque()

        def reserve(dispatcher=dispatcher, held=held2, depth=n * 8) -> None:
            held.append(dispatcher._try_reserve(frozenset()))
            if len(held) > depth:
                dispatcher.release(held.popleft())

        rows.append(
            {
                "what": "Dispatcher reserve+release (least_inflight, with metrics)",
                "boards": n,
                **_time_it(reserve, iterations),
            }
        )
    return rows


def _time_it(fn: Callable[[], None], iterations: int) -> dict[str, float]:
    for _ in range(min(1000, iterations)):
        fn()
    best = float("inf")
    for _ in range(3):  # best of 3: the least disturbed by the other processes on a shared machine
        start = time.perf_counter()
        for _ in range(iterations):
            fn()
        best = min(best, (time.perf_counter() - start) / iterations)
    return {"us_per_decision": best * 1e6}


# ====================================================================== the run
def pct(values: Sequence[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if len(values) else None


def minus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def med(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return float(np.median(vals)) if vals else None


@dataclass
class Plan:
    proxy_cpus: set[int] | None
    rest_cpus: set[int] | None
    description: str


def plan_pinning(mode: str) -> Plan:
    cpus = sorted(os.sched_getaffinity(0))
    if mode == "split" and len(cpus) >= 2:
        proxy, rest = {cpus[0]}, set(cpus[1:])
        return Plan(
            proxy,
            rest,
            f"proxy under test (scheduler or nginx) pinned to CPU {cpus[0]}; generator, agents and this "
            f"harness pinned to CPU {','.join(map(str, sorted(rest)))}",
        )
    return Plan(None, None, "no pinning: every process may run on every CPU")


def capacity_phase(gen: Generator, targets: list[str], groups: dict[str, list[int]], args, log) -> list[dict]:
    runs = []
    for rep in range(args.repetitions):
        order = targets[rep % len(targets) :] + targets[: rep % len(targets)]  # rotate: no order bias
        for target in order:
            meter = Meter(groups)
            marks: dict[str, dict[str, float]] = {}

            def on_mark(kind: str, meter=meter, marks=marks) -> None:
                if kind == "start":
                    meter.start()
                else:
                    marks["cpu"] = meter.stop()

            result = gen.call(
                "closed",
                target,
                args.concurrency,
                args.warmup,
                args.duration,
                timeout_s=args.warmup + args.duration + 90,
                on_mark=on_mark,
            )
            cpu = marks["cpu"]
            n = result["completed"]
            proxy_cpu = cpu.get(target, 0.0) if target not in NO_PROXY else 0.0
            run = {
                "target": target,
                "repetition": rep + 1,
                "completed": n,
                "window_s": result["window_s"],
                "capacity_req_per_s": n / result["window_s"],
                "latency_p50_ms": pct(result["latency_ms"], 50),
                "latency_p99_ms": pct(result["latency_ms"], 99),
                "proxy_cpu_ms_per_req": proxy_cpu / n * 1e3 if n and target not in NO_PROXY else None,
                "proxy_core_busy": proxy_cpu / cpu["wall"] if target not in NO_PROXY else None,
                # Runnable but not running: starved by other processes, or its own threads, on its CPU.
                "proxy_cpu_wait": cpu[f"{target}_wait"] / cpu["wall"] if target not in NO_PROXY else None,
                "generator_cpu_ms_per_req": cpu["generator"] / n * 1e3 if n else None,
                "generator_core_busy": cpu["generator"] / cpu["wall"],
                "agents_cpu_ms_per_req": cpu["agents"] / n * 1e3 if n else None,
                "rest_cores_busy": (cpu["generator"] + cpu["agents"] + cpu["harness"]) / cpu["wall"],
                "others_cores_busy": cpu["others"] / cpu["wall"],
                "inband": {k: {"p50": pct(v, 50), "p99": pct(v, 99)} for k, v in result["inband"].items()},
                "errors": result["errors"],
            }
            runs.append(run)
            log(
                f"  capacity rep {rep + 1} {target:9s} {run['capacity_req_per_s']:7.1f} req/s"
                + (
                    f"  proxy {run['proxy_cpu_ms_per_req']:.2f} CPU-ms/req, core {run['proxy_core_busy']:.0%}"
                    if run["proxy_cpu_ms_per_req"] is not None
                    else ""
                )
                + (f"  ERRORS {sum(result['errors'].values())}" if result["errors"] else "")
            )
    return runs


def latency_phase(gen: Generator, targets: list[str], groups: dict[str, list[int]], args, log) -> list[dict]:
    reps = []
    for rep in range(args.repetitions):
        meter = Meter(groups)
        meter.start()
        result = gen.call("latency", targets, args.duration, args.block, timeout_s=args.duration + 120)
        cpu = meter.stop()
        result["others_cores_busy"] = cpu["others"] / cpu["wall"]
        reps.append(result)
        lat = result["latency_ms"]
        log(
            f"  latency rep {rep + 1}: "
            + "  ".join(f"{t} p50 {fmt(pct(lat[t], 50))} ms (n={len(lat[t])})" for t in targets)
            + f"  others {result['others_cores_busy']:.0%}"
        )
    return reps


def summarize(cap_runs: list[dict], lat_reps: list[dict], targets: list[str]) -> dict[str, Any]:
    summary: dict[str, Any] = {"capacity": {}, "latency": {}}
    for target in targets:
        runs = [r for r in cap_runs if r["target"] == target]
        s = {
            k: med([r[k] for r in runs])
            for k in (
                "capacity_req_per_s",
                "proxy_cpu_ms_per_req",
                "proxy_core_busy",
                "proxy_cpu_wait",
                "generator_cpu_ms_per_req",
                "generator_core_busy",
                "agents_cpu_ms_per_req",
                "rest_cores_busy",
                "others_cores_busy",
                "latency_p50_ms",
                "latency_p99_ms",
            )
        }
        s["capacity_min"] = min(r["capacity_req_per_s"] for r in runs)
        s["capacity_max"] = max(r["capacity_req_per_s"] for r in runs)
        cpu = s["proxy_cpu_ms_per_req"]
        s["cpu_bound_capacity_req_per_s"] = 1000.0 / cpu if cpu else None
        s["saturated"] = bool(s["proxy_core_busy"] is not None and s["proxy_core_busy"] >= SATURATED)
        s["errors"] = sum(sum(r["errors"].values()) for r in runs)
        summary["capacity"][target] = s
    pooled = {t: [x for rep in lat_reps for x in rep["latency_ms"][t]] for t in targets}
    direct = pooled["direct"]
    for target in targets:
        s = {"p50_ms": pct(pooled[target], 50), "p99_ms": pct(pooled[target], 99), "n": len(pooled[target])}
        s["errors"] = sum(n for r in lat_reps for k, n in r["errors"].items() if k.startswith(f"{target}:"))
        if target != "direct":
            s["added_p50_ms"] = minus(s["p50_ms"], pct(direct, 50))
            s["added_p99_ms"] = minus(s["p99_ms"], pct(direct, 99))
            s["added_p50_ms_per_rep"] = [
                minus(pct(r["latency_ms"][target], 50), pct(r["latency_ms"]["direct"], 50)) for r in lat_reps
            ]
        summary["latency"][target] = s
    summary["latency_others_cores_busy_per_rep"] = [r["others_cores_busy"] for r in lat_reps]
    inband_low = {k: [x for rep in lat_reps for x in rep["inband"][k]] for k in lat_reps[0]["inband"]}
    summary["inband_concurrency_1"] = {
        k: {"p50": pct(v, 50), "p99": pct(v, 99)} for k, v in inband_low.items()
    }
    sched_runs = [r for r in cap_runs if r["target"] == "scheduler"]
    summary["inband_saturation"] = {
        k: {q: med([r["inband"][k][q] for r in sched_runs]) for q in ("p50", "p99")}
        for k in sched_runs[0]["inband"]
    }
    summary["targets"] = verdicts(summary)
    return summary


def verdicts(summary: dict[str, Any]) -> dict[str, Any]:
    """The issue's targets, judged honestly: a proxy that was not saturated has no measured capacity,
    so the capacity ratio then falls back to the 1-core bound (CPU per request)."""
    cap, lat = summary["capacity"], summary["latency"]
    out: dict[str, Any] = {}
    if "nginx" in cap:
        s, n = cap["scheduler"], cap["nginx"]
        measured = s["capacity_req_per_s"] / n["capacity_req_per_s"]
        bound = None
        if s["cpu_bound_capacity_req_per_s"] and n["cpu_bound_capacity_req_per_s"]:
            bound = s["cpu_bound_capacity_req_per_s"] / n["cpu_bound_capacity_req_per_s"]
        both_saturated = s["saturated"] and n["saturated"]
        judged = measured if both_saturated or bound is None else bound
        out["capacity_ratio"] = {
            "measured": measured,
            "one_core_bound": bound,
            "judged": judged,
            "judged_on": "measured req/s (both proxies saturated)"
            if both_saturated or bound is None
            else "1-core bound (the proxies were not both saturated)",
            "target": TARGET_CAPACITY_RATIO,
            "reached": judged >= TARGET_CAPACITY_RATIO,
        }
    if "proxyless" in cap:
        p, d = cap["proxyless"]["capacity_req_per_s"], cap["direct"]["capacity_req_per_s"]
        nginx = cap["nginx"]["capacity_req_per_s"] if "nginx" in cap else None
        added_p = lat["proxyless"]["added_p50_ms"]
        out["proxyless"] = {
            "vs_direct": p / d if d else None,
            "vs_nginx": p / nginx if nginx else None,
            "added_p50_ms": added_p,
            "reached_vs_direct": bool(d and p / d >= TARGET_PROXYLESS_VS_DIRECT),
            "reached_vs_nginx": None if nginx is None else p >= nginx,
            "reached_added_p50": added_p is not None and added_p <= TARGET_PROXYLESS_ADDED_P50_MS,
        }
    added = lat["scheduler"]["added_p50_ms"]
    out["added_p50_ms"] = {
        "value": added,
        "nginx": lat["nginx"]["added_p50_ms"] if "nginx" in lat else None,
        "target": TARGET_ADDED_P50_MS,
        "reached": added is not None and added <= TARGET_ADDED_P50_MS,
    }
    return out


# ====================================================================== printing
def fmt(value: Any, spec: str = ".2f") -> str:
    """The package's number format (npudure.bench.fmt), with this report's two decimals by default."""
    return bench_fmt.f(value, spec)


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """The path or field name left, its figures right-aligned under their headers."""
    return bench_fmt.text_table(headers, rows, align="lr", indent="  ")


def report(conditions: dict, summary: dict, routing: list[dict], targets: list[str], nginx_note: str) -> str:
    out: list[str] = ["", "=" * 100]
    out.append(
        "NPUDure scheduler forwarding vs nginx grpc_pass vs proxyless — backend sim (EMULATED NPU), loopback"
    )
    out.append("=" * 100)
    out += [f"  {key:15s} {value}" for key, value in conditions.items()]
    if nginx_note:
        out.append(f"  {'nginx note':15s} {nginx_note}")

    cap = summary["capacity"]
    out += ["", "1. Forwarding capacity, closed loop (median of repetitions; req/s min–max in brackets)"]
    rows = []
    for t in targets:
        s = cap[t]
        rows.append(
            [
                t,
                f"{s['capacity_req_per_s']:.0f} [{s['capacity_min']:.0f}–{s['capacity_max']:.0f}]",
                fmt(s["proxy_cpu_ms_per_req"]),
                fmt(s["proxy_core_busy"], ".0%"),
                fmt(s["proxy_cpu_wait"], ".0%"),
                fmt(s["cpu_bound_capacity_req_per_s"], ".0f"),
                fmt(s["generator_cpu_ms_per_req"]),
                fmt(s["generator_core_busy"], ".0%"),
                fmt(s["agents_cpu_ms_per_req"]),
                fmt(s["rest_cores_busy"], ".0%"),
                fmt(s["others_cores_busy"], ".0%"),
                str(s["errors"]),
            ]
        )
    out += table(
        [
            "path",
            "req/s",
            "proxy CPU-ms/req",
            "proxy core",
            "proxy waited",
            "1-core bound",
            "gen CPU-ms/req",
            "gen core",
            "agents CPU-ms/req",
            "gen+agents",
            "others",
            "errors",
        ],
        rows,
    )
    out += [
        "  proxy core: the proxy's CPU time / wall time (100% = its one core saturated).",
        "  proxy waited: time its threads were runnable but had no CPU / wall time (starved by others).",
        "  1-core bound: 1000 / proxy CPU-ms per request = req/s one core could forward at this cost",
        "    (measured below saturation, where each wake-up carries fewer requests, it errs low).",
        "  gen+agents: CPU of generator + agents + harness / wall, in cores: this measurement's ceiling.",
        "  others: CPU used by processes outside this benchmark during the window (a shared machine).",
    ]
    for t in targets:
        if t in NO_PROXY or cap[t]["saturated"]:
            continue
        wait = cap[t]["proxy_cpu_wait"] or 0.0
        if wait >= STARVED:
            out.append(
                f"  NOTE: {t} was runnable without a CPU {wait:.0%} of the time (other processes, or its own "
                "threads, on its CPU): its req/s understates its capacity."
            )
        else:
            out.append(
                f"  NOTE: {t} was not saturated (core < {SATURATED:.0%} busy): its req/s is the ceiling "
                "set by generator+agents, not its own capacity."
            )

    lat = summary["latency"]
    out += ["", "2. Latency added at concurrency 1 (targets interleaved in blocks; pooled over repetitions)"]
    rows = [
        [
            t,
            fmt(lat[t]["p50_ms"]),
            fmt(lat[t]["p99_ms"]),
            fmt(lat[t].get("added_p50_ms")),
            fmt(lat[t].get("added_p99_ms")),
            str(lat[t]["n"]),
            str(lat[t]["errors"]),
            ", ".join(fmt(x) for x in lat[t].get("added_p50_ms_per_rep", [])) or "—",
        ]
        for t in targets
    ]
    out += table(
        ["path", "p50 ms", "p99 ms", "added p50 ms", "added p99 ms", "n", "errors", "added p50 per rep"], rows
    )
    others = ", ".join(f"{x:.0%}" for x in summary["latency_others_cores_busy_per_rep"])
    out.append(f"  others (CPU used by processes outside this benchmark), per repetition: {others}")

    out += ["", "3. Routing decision time", "  In-band, as the scheduler reports it in each response (µs):"]
    low, high = summary["inband_concurrency_1"], summary["inband_saturation"]
    rows = [
        [
            k,
            fmt(low[k]["p50"], ".0f"),
            fmt(low[k]["p99"], ".0f"),
            fmt(high[k]["p50"], ".0f"),
            fmt(high[k]["p99"], ".0f"),
        ]
        for k in low
    ]
    out += table(["field", "conc 1 p50", "conc 1 p99", "saturation p50", "saturation p99"], rows)
    out += [
        "  route_us: the scheduler's own time besides getting a board and the board call;",
        "  scheduler_queue_us: time to get a board, the policy's choice included.",
        "  Microbenchmark, µs per decision: candidate filter + choose() + in-flight +1, and the -1 when",
        "  a request completes (about half the slots busy); best of 3:",
    ]
    counts = sorted({r["boards"] for r in routing})
    cells = {(r["what"], r["boards"]): r["us_per_decision"] for r in routing}
    names = list(dict.fromkeys(r["what"] for r in routing))
    out += table(
        ["", *(f"N={n}" for n in counts)], [[w, *(fmt(cells.get((w, n))) for n in counts)] for w in names]
    )

    out += ["", "4. Against the issue's targets"]
    v = summary["targets"]
    if "capacity_ratio" in v:
        c = v["capacity_ratio"]
        out.append(
            f"  capacity scheduler/nginx: measured {c['measured']:.2f}×, "
            f"1-core bound {fmt(c['one_core_bound'])}×"
        )
        out.append(
            f"  target ≥ {c['target']:.1f}× nginx forwarding capacity: "
            f"{'REACHED' if c['reached'] else 'NOT REACHED'} ({c['judged']:.2f}×, judged on {c['judged_on']})"
        )
    else:
        out.append(
            f"  target ≥ {TARGET_CAPACITY_RATIO:.1f}× nginx forwarding capacity: NOT MEASURED (no nginx)"
        )
    a = v["added_p50_ms"]
    nginx_part = f"; nginx adds {fmt(a['nginx'])} ms" if a["nginx"] is not None else ""
    reached = "REACHED" if a["reached"] else "NOT REACHED"
    out.append(
        f"  target ≤ {a['target']:.1f} ms added p50 (scheduler): {reached} ({fmt(a['value'])} ms{nginx_part})"
    )
    if "proxyless" in v:
        p = v["proxyless"]

        def verdict(ok: bool | None) -> str:
            return "NOT MEASURED" if ok is None else ("REACHED" if ok else "NOT REACHED")

        out.append(
            f"  target proxyless ≥ {TARGET_PROXYLESS_VS_DIRECT:.2f}× direct: "
            f"{verdict(p['reached_vs_direct'])} ({fmt(p['vs_direct'])}×)"
        )
        out.append(
            f"  target proxyless ≥ nginx: {verdict(p['reached_vs_nginx'])} ({fmt(p['vs_nginx'])}× nginx)"
        )
        out.append(
            f"  target ≤ {TARGET_PROXYLESS_ADDED_P50_MS:.1f} ms added p50 (proxyless): "
            f"{verdict(p['reached_added_p50'])} ({fmt(p['added_p50_ms'])} ms)"
        )
    out.append("=" * 100)
    return "\n".join(out)


# ====================================================================== main
def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--duration", type=float, default=5.0, help="measured seconds per run (default 5)")
    p.add_argument(
        "--warmup", type=float, default=1.0, help="unmeasured seconds before each capacity run (default 1)"
    )
    p.add_argument("--repetitions", type=int, default=3, help="repetitions of every run (default 3)")
    p.add_argument(
        "--concurrency", type=int, default=32, help="requests outstanding in capacity runs (default 32)"
    )
    p.add_argument("--agents", type=int, default=4, help="sim agents (default 4)")
    p.add_argument("--slots", type=int, default=4, help="NPU slots per sim agent (npu_cores, default 4)")
    p.add_argument(
        "--time-scale", type=float, default=0.01, help="sim service-time scale (default 0.01: ~0.12 ms)"
    )
    p.add_argument("--policy", default="least_inflight", help="scheduler policy (default least_inflight)")
    p.add_argument(
        "--block", type=int, default=20, help="latency runs: requests per target per turn (default 20)"
    )
    p.add_argument(
        "--pinning",
        choices=("split", "none"),
        default="split",
        help="split: proxy on CPU 0, everything else on the other CPUs (default); none: no pinning",
    )
    p.add_argument("--nginx", default=shutil.which("nginx") or "/usr/sbin/nginx", help="nginx binary")
    p.add_argument("--micro-iterations", type=int, default=20000, help="routing microbenchmark iterations")
    p.add_argument("--out", type=Path, help="also write the results as JSON here")
    p.add_argument(
        "--quick",
        action="store_true",
        help="smoke run, a few seconds in total; sets duration, warm-up, repetitions, concurrency, agents, "
        "slots, block and micro-iterations to tiny values (the figures are noise)",
    )
    args = p.parse_args(argv)
    if args.quick:
        args.duration, args.warmup, args.repetitions = 0.4, 0.2, 1
        args.concurrency, args.agents, args.slots, args.block = 4, 2, 2, 5
        args.micro_iterations = 300
    for name in ("duration", "repetitions", "concurrency", "agents", "slots", "block", "micro_iterations"):
        if getattr(args, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be positive")
    return args


def conditions_for(args, plan: Plan, nginx_version_text: str, payload_bytes: int | None) -> dict[str, Any]:
    import grpc

    return {
        "machine": f"{os.cpu_count()} CPUs ({platform.processor() or platform.machine()}), "
        f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "grpcio": grpc.__version__,
        "nginx": nginx_version_text,
        "frame": f"640x640x3 raw RGB = {np.prod(FRAME_SHAPE):,} B; request message {payload_bytes or 0:,} B",
        "backend": f"sim (EMULATED NPU), time_scale {args.time_scale} "
        f"(~{12.38 * args.time_scale:.2f} ms per frame per slot)",
        "agents": f"{args.agents} agents × {args.slots} slots (queue_limit 1024); scheduler policy "
        f"{args.policy}, board_max_inflight {4 * args.slots}, 2 connections per board",
        "nginx setup": "worker_processes 1 (one process, like the scheduler), upstream least_conn over the "
        f"same agents, keepalive {2 * args.concurrency}, grpc_pass grpc://, h2c listener, "
        "client_max_body_size 8m, client_body_buffer_size 2m, access_log off",
        "generator": f"separate process, grpc.aio raw bytes, {CLIENT_CONNECTIONS} connections per address; "
        f"proxyless: {CLIENT_CONNECTIONS} channels to the GetRoute target (weighted_round_robin + ORCA, "
        "health checking, retries), each with one connection per agent",
        "pinning": plan.description,
        "capacity runs": f"closed loop, concurrency {args.concurrency}, warm-up {args.warmup} s, "
        f"{args.duration} s measured, {args.repetitions} repetition(s), targets rotated",
        "latency runs": f"concurrency 1, {args.duration} s per repetition, targets interleaved "
        f"in blocks of {args.block}",
        "malloc": " ".join(f"{k}={v}" for k, v in MALLOC_TUNING.items()) + " (scheduler, agents, generator)",
        "load average": " ".join(f"{x:.2f}" for x in os.getloadavg()) + " (at the end)",
        **({"mode": "QUICK smoke run: the figures are noise"} if args.quick else {}),
    }


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)  # SIGTERM cleans up like Ctrl-C: finally blocks run
    from npudure.client.routes import channel_options, fetch_route
    from npudure.lab.local import LocalCluster

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    os.environ.update(MALLOC_TUNING)  # the generator child inherits it (glibc reads it at start)
    plan = plan_pinning(args.pinning)
    version = nginx_version(args.nginx) if args.nginx and Path(args.nginx).exists() else None
    nginx_note = ""
    if version is None:
        nginx_note = (
            f"not found at {args.nginx!r}: peer SKIPPED. Install it with `apt-get install nginx-light` "
            "(or pass --nginx /path/to/nginx)"
        )
        log(f"nginx {nginx_note}")
    version_text = ".".join(map(str, version)) if version else "absent"

    log(f"routing microbenchmark ({args.micro_iterations} iterations per cell)...")
    routing = routing_microbench((4, 16, 64), args.micro_iterations)

    cluster = LocalCluster(
        boards=args.agents,
        backend="sim",
        time_scale=args.time_scale,
        policy=args.policy,
        npu_cores=args.slots,
        board_max_inflight=4 * args.slots,
        connections_per_board=2,
        agent_overrides={"queue_limit": 1024},
    )
    nginx: Nginx | None = None
    gen: Generator | None = None
    try:
        log(f"starting {args.agents} sim agents and the scheduler...")
        cluster.start()
        agent_addresses = [p.address for p in cluster.agents.values()]
        targets = ["scheduler", "proxyless", "direct"]
        if version:
            nginx = Nginx(args.nginx, version, agent_addresses, keepalive=2 * args.concurrency)
            nginx.start()
            targets = ["scheduler", "nginx", "proxyless", "direct"]
        assert cluster.scheduler is not None and cluster.scheduler.pid is not None
        agent_pids = [p.pid for p in cluster.agents.values() if p.pid]
        gen = Generator(plan.rest_cpus)
        if plan.proxy_cpus and plan.rest_cpus:
            pin([cluster.scheduler.pid, *(nginx.pids() if nginx else [])], plan.proxy_cpus)
            pin([*agent_pids, os.getpid()], plan.rest_cpus)
        addresses = {"scheduler": [cluster.address], "direct": agent_addresses}
        if nginx:
            addresses["nginx"] = [nginx.address]
        route = fetch_route(cluster.address)
        opened = gen.call("open", addresses, (route.target, channel_options(route)), timeout_s=60)
        groups = {"scheduler": [cluster.scheduler.pid], "agents": agent_pids, "generator": [gen.pid]}
        if nginx:
            groups["nginx"] = nginx.pids()
        log("capacity runs...")
        cap_runs = capacity_phase(gen, targets, groups, args, log)
        log("latency runs (concurrency 1)...")
        lat_reps = latency_phase(gen, targets, groups, args, log)
        if nginx and "buffered to a temporary file" in nginx.errors():
            nginx_note = "WARNING: nginx buffered request bodies to disk (see its error log)"
    except (RuntimeError, TimeoutError, ConnectionError) as exc:
        log(f"forwarding benchmark: {exc}")
        return 1
    finally:
        if gen:
            gen.stop()
        if nginx:
            nginx.stop()
        cluster.stop()

    summary = summarize(cap_runs, lat_reps, targets)
    conditions = conditions_for(args, plan, version_text, opened["payload_bytes"])
    print(report(conditions, summary, routing, targets, nginx_note), flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "conditions": conditions,
            "summary": summary,
            "capacity_runs": cap_runs,
            "routing_microbench": routing,
            "nginx_note": nginx_note,
        }
        args.out.write_text(json.dumps(payload, indent=2))
        log(f"results written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
