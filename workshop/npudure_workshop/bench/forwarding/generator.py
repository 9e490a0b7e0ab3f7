"""The load generator: its own process, raw-bytes unary calls over the shared targets of the harness
(``npudure_workshop.bench.load.Target`` to an address, ``npudure.client.proxyless.ProxylessTarget`` over the
scheduler's route), driven by the parent over a pipe; every wait the parent does is bounded."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import multiprocessing
import multiprocessing.connection
import os
import signal
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import grpc
import numpy as np

from npudure.client.proxyless import ProxylessTarget
from npudure.client.routes import RouteInfo
from npudure.proto import contract
from npudure.proto import inference_pb2 as pb
from npudure.vision.frames import FRAME_SHAPE
from npudure_workshop.bench.load import LoadTarget, Target

CLIENT_CONNECTIONS = 2  # generator -> each target address (separate TCP connections)
OPEN_TIMEOUT_S = 15.0


class _Generator:
    """Runs in its own process: raw-bytes unary calls, no protobuf work per request."""

    def __init__(self, conn: multiprocessing.connection.Connection) -> None:
        self.conn = conn
        rng = np.random.default_rng(0)
        frame = rng.integers(0, 256, FRAME_SHAPE, dtype=np.uint8).tobytes()
        self.payload = pb.InferRequest(encoding=pb.ENCODING_RAW_RGB, frame=frame).SerializeToString()
        self.targets: dict[str, list[LoadTarget]] = {}
        self.rr: dict[str, itertools.count[int]] = {}

    async def open(
        self, addresses: dict[str, list[str]], proxyless: tuple[str, RouteInfo] | None = None
    ) -> dict[str, Any]:
        """``CLIENT_CONNECTIONS`` channels to each address; with ``proxyless`` (a scheduler and its
        route), as many channels to the route's multi-address target: gRPC picks the board. Bare
        channels on every path (no token interceptor: frames need none), so no path pays for one."""
        options = [*contract.message_size_options(16 << 20), ("grpc.use_local_subchannel_pool", 1)]
        plans: dict[str, list[LoadTarget]] = {
            name: [Target(a, CLIENT_CONNECTIONS, options=options, from_env=False) for a in group]
            for name, group in addresses.items()
        }
        if proxyless is not None:
            # The route is the run's record: the channels keep it and do not follow changes.
            scheduler, route = proxyless
            plans["proxyless"] = [
                ProxylessTarget(scheduler, CLIENT_CONNECTIONS, fixed_route=route, from_env=False)
            ]
        for name, group in plans.items():
            self.targets[name], self.rr[name] = group, itertools.count()
        await asyncio.gather(*(t.open(OPEN_TIMEOUT_S) for group in plans.values() for t in group))
        return {"payload_bytes": len(self.payload)}

    def _next(self, target: str) -> LoadTarget:
        group = self.targets[target]
        return group[next(self.rr[target]) % len(group)]

    async def closed(
        self, target: str, concurrency: int, warmup_s: float, duration_s: float
    ) -> dict[str, Any]:
        payload = self.payload
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
                    reply = await self._next(target).infer(payload, 30)
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
                await self._next(target).infer(payload, 30)
        order = list(targets)
        end = time.perf_counter() + duration_s
        while time.perf_counter() < end:
            for target in order:
                for _ in range(block):
                    next_target = self._next(target)
                    sent = time.perf_counter()
                    try:
                        reply = await next_target.infer(payload, 30)
                    except grpc.aio.AioRpcError as exc:
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
            timing = pb.InferResponse.FromString(raw).timing
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
            for group in self.targets.values():
                for target in group:
                    await target.close()


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
