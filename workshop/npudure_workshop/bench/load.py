"""Load generators: closed loop at concurrency c, open loop at rate λ (constant or Poisson arrivals).

The generator must never be the bottleneck, so each call sends pre-serialized InferRequest bytes over
a generic unary call (no protobuf work per request) and keeps the raw response bytes; responses are
parsed after the run. Warm-up samples are recorded but fall outside the measurement window.

Open-loop latency counts from the INTENDED send time: when the generator (or a full outstanding cap)
sends late, the wait is charged to latency rather than silently dropped, and the lateness itself is
recorded and flagged.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import grpc
import numpy as np

from npudure.client.central import central_options, lost_to_a_server_stop
from npudure.client.opening import ClosedOnFailure, Unreachable
from npudure.proto import contract
from npudure.security import access as security
from npudure_workshop.bench.cpu import CpuProbe, CpuSample, harness_cpu_sample
from npudure_workshop.bench.samples import Samples, from_raw

# Open loop: sends later than this (p99) mean the generator did not keep its schedule.
BEHIND_LAG_P99_MS = 10.0
# Open loop: sending fewer than this share of the requests scheduled in the window means λ was not offered.
BEHIND_RATE_FRACTION = 0.95
# After an error a closed-loop worker pauses this long, so a dead target is not spun on at full speed.
ERROR_PAUSE_S = 0.01
MAX_ERROR_MESSAGES = 5


class LoadTarget(Protocol):
    """What the load loops drive: the gRPC Target here, or http_load.HttpTarget."""

    async def open(self, ready_timeout_s: float = 10.0) -> None: ...

    async def close(self) -> None: ...

    def infer(self, payload: bytes, timeout_s: float) -> Awaitable[bytes]: ...


class Target(ClosedOnFailure):
    """``connections`` gRPC channels (separate TCP connections) to one scheduler or agent — or, given
    the channel ``options`` of a proxyless route (npudure.client.routes.channel_options), to every
    board of the route's target, balanced by gRPC itself. ``from_env=False``: no TLS identity or admin
    token from the environment (frames need no token)."""

    def __init__(
        self,
        address: str,
        connections: int = 2,
        max_message_bytes: int = 16 * 1024 * 1024,
        options: Sequence[tuple[str, object]] | None = None,
        from_env: bool = True,
    ) -> None:
        self.address = address
        self.from_env = from_env
        self.connections = max(1, connections)
        self._options = (
            list(options)
            if options is not None
            else [
                # Calls wait for a reconnect (a scheduler restart costs no request), but a server's
                # own error is never retried away: the benchmark counts it.
                *central_options(max_message_bytes, retry=False),
                # Without a local subchannel pool, channels with identical options share one connection.
                ("grpc.use_local_subchannel_pool", 1),
            ]
        )
        self._channels: list[grpc.aio.Channel] = []
        self._calls: list[grpc.aio.UnaryUnaryMultiCallable] = []
        self._rr = itertools.count()

    async def _connect(self, ready_timeout_s: float) -> None:
        for _ in range(self.connections):
            channel = security.aio_channel(self.address, self._options, from_env=self.from_env)
            self._channels.append(channel)
            # No serializers: the request is already bytes and the response stays bytes.
            self._calls.append(channel.unary_unary(contract.INFER_METHOD))
        try:
            await asyncio.wait_for(
                asyncio.gather(*(c.channel_ready() for c in self._channels)), ready_timeout_s
            )
        except TimeoutError:
            raise Unreachable(
                f"cannot connect to {self.address} within {ready_timeout_s:.0f}s: is the scheduler (or "
                "agent) running there, and is the address host:port of its gRPC port?"
            ) from None

    async def close(self) -> None:
        channels, self._channels, self._calls = self._channels, [], []
        for channel in channels:
            await channel.close()

    def infer(self, payload: bytes, timeout_s: float) -> grpc.aio.UnaryUnaryCall:
        call = self._calls[next(self._rr) % len(self._calls)]
        return call(payload, timeout=timeout_s)


@dataclass
class LoadResult:
    samples: Samples
    window_start_s: float
    window_end_s: float
    cpu_start: CpuSample
    cpu_end: CpuSample
    error_messages: dict[str, int] = field(default_factory=dict)
    # Calls replayed once because the server closed their connection as it stopped (``_call``).
    replayed: dict[str, int] = field(default_factory=dict)
    # Open loop only.
    schedule: dict[str, object] = field(default_factory=dict)

    @property
    def wall_s(self) -> float:
        return self.cpu_end.wall_s - self.cpu_start.wall_s

    def generator_cpu(self) -> dict[str, float | None]:
        wall = self.wall_s
        proc = self.cpu_end.process_s - self.cpu_start.process_s
        thread = self.cpu_end.thread_s - self.cpu_start.thread_s
        return {
            "wall_s": wall,
            "process_cpu_s": proc,
            "loop_thread_cpu_s": thread,
            "process_fraction_of_core": proc / wall if wall > 0 else None,
            "loop_thread_fraction_of_core": thread / wall if wall > 0 else None,
        }


class _Collector:
    def __init__(self) -> None:
        self.intended: list[float] = []
        self.sent: list[float] = []
        self.done: list[float] = []
        self.codes: list[int] = []
        self.responses: list[bytes | None] = []
        self.errors: dict[str, int] = {}
        self.replayed: dict[str, int] = {}

    def add(self, intended: float, sent: float, done: float, code: int, response: bytes | None) -> None:
        self.intended.append(intended)
        self.sent.append(sent)
        self.done.append(done)
        self.codes.append(code)
        self.responses.append(response)

    def note_error(self, exc: grpc.aio.AioRpcError) -> int:
        _count(self.errors, exc)
        return int(exc.code().value[0])

    def note_replay(self, exc: grpc.aio.AioRpcError) -> None:
        _count(self.replayed, exc)

    def samples(self) -> Samples:
        return from_raw(self.intended, self.sent, self.done, self.codes, self.responses)


def _count(messages: dict[str, int], exc: grpc.aio.AioRpcError) -> None:
    key = f"{exc.code().name}: {exc.details()}"
    if key in messages or len(messages) < MAX_ERROR_MESSAGES:
        messages[key] = messages.get(key, 0) + 1


async def _call(
    target: LoadTarget, payload: bytes, timeout_s: float, col: _Collector
) -> tuple[int, bytes | None]:
    """One request. A call lost to a server's stop (the connection closed under it after GOAWAY) is
    replayed once within what is left of its deadline, as a client with the retry policy would, and
    counted in ``replayed``; its latency spans both attempts. Every other error is the sample's."""
    start = time.perf_counter()
    try:
        return 0, await target.infer(payload, timeout_s)
    except grpc.aio.AioRpcError as exc:
        left = timeout_s - (time.perf_counter() - start)
        if not lost_to_a_server_stop(exc) or left <= 0:
            return col.note_error(exc), None
        col.note_replay(exc)
    try:
        return 0, await target.infer(payload, left)
    except grpc.aio.AioRpcError as exc:
        return col.note_error(exc), None


async def closed_loop(
    target: LoadTarget,
    requests: Sequence[bytes],
    concurrency: int,
    warmup_s: float,
    duration_s: float,
    min_samples: int = 100,
    max_duration_s: float | None = None,
    timeout_s: float = 30.0,
    cpu_probe: CpuProbe = harness_cpu_sample,
    progress: Callable[[float], None] | None = None,
    t0: float | None = None,
    stop_when: Callable[[], bool] | None = None,
) -> LoadResult:
    """``concurrency`` requests always outstanding. The window opens after ``warmup_s`` and closes after
    ``duration_s`` once ``min_samples`` successful measured requests exist (or ``max_duration_s`` passed),
    or earlier once ``stop_when()`` is true (a window as long as an operator's action)."""
    if concurrency < 1:
        raise ValueError("concurrency must be at least 1")
    col = _Collector()
    counter = itertools.count()
    n_frames = len(requests)
    measured_ok = 0
    stop = False
    cpu_start = cpu_probe()
    t0 = time.perf_counter() if t0 is None else t0  # times are seconds since t0

    async def worker() -> None:
        nonlocal measured_ok
        while not stop:
            payload = requests[next(counter) % n_frames]
            sent = time.perf_counter() - t0
            code, resp = await _call(target, payload, timeout_s, col)
            done = time.perf_counter() - t0
            col.add(sent, sent, done, code, resp)
            if code == 0 and sent >= warmup_s:
                measured_ok += 1
            elif code != 0:
                await asyncio.sleep(ERROR_PAUSE_S)

    workers = [asyncio.create_task(worker()) for _ in range(concurrency)]
    try:
        limit = warmup_s + longest_window_s(duration_s, max_duration_s)
        target_end = warmup_s + duration_s
        while True:
            elapsed = time.perf_counter() - t0
            if progress:
                progress(elapsed)
            if elapsed >= limit or (elapsed >= target_end and measured_ok >= min_samples):
                break
            if stop_when is not None and stop_when():
                break
            await asyncio.sleep(min(0.1, max(0.001, target_end - elapsed)))
        window_end = time.perf_counter() - t0
        stop = True  # set in the same step as window_end: every later send would be after the window
        await asyncio.gather(*workers)
    finally:
        stop = True
        for w in workers:
            w.cancel()
    cpu_end = cpu_probe()
    return LoadResult(col.samples(), warmup_s, window_end, cpu_start, cpu_end, col.errors, col.replayed)


def arrival_offsets(rate: float, span_s: float, arrival: str, seed: int) -> np.ndarray:
    """Intended send times (s from start) for rate λ over ``span_s``: evenly spaced or Poisson. Poisson
    gaps are drawn in fixed-size chunks, so a longer span extends the same schedule."""
    if rate <= 0:
        raise ValueError("rate must be positive")
    if arrival == "constant":
        return np.arange(0.0, span_s, 1.0 / rate)
    if arrival == "poisson":
        rng = np.random.default_rng(seed)
        out: list[np.ndarray] = []
        last = 0.0
        while last < span_s:
            times = last + np.cumsum(rng.exponential(1.0 / rate, size=1024))
            out.append(times)
            last = float(times[-1])
        all_times = np.concatenate(out)
        return all_times[all_times < span_s]
    raise ValueError(f"arrival {arrival!r} is not known; use constant or poisson")


def longest_window_s(duration_s: float, max_duration_s: float | None) -> float:
    """How long a window extended for ``min_samples`` may last at most (after the warm-up): the given
    ``--max-duration``, else ten windows and a minute. Both loads stop there, with or without the samples."""
    return max_duration_s if max_duration_s is not None else 10 * duration_s + 60


def open_loop_window(
    rate: float,
    warmup_s: float,
    duration_s: float,
    arrival: str,
    seed: int,
    min_samples: int,
    max_duration_s: float | None = None,
) -> tuple[np.ndarray, float]:
    """(intended send times, window end): the window lasts ``duration_s`` or until ``min_samples``
    requests are scheduled inside it, whichever is longer, but never past ``longest_window_s``: a rate
    too low for the samples gives a short run (invalid for too few samples), not one of days."""
    limit = warmup_s + longest_window_s(duration_s, max_duration_s)
    end = min(warmup_s + duration_s, limit)
    # Twice the sends the samples need (and a second) is plenty; never past the longest window.
    span = min(warmup_s + max(duration_s, 2.0 * min_samples / rate + 1.0), max(limit, end))
    offsets = arrival_offsets(rate, span, arrival, seed)
    if min_samples:
        inside = offsets[offsets >= warmup_s]
        if inside.size < min_samples:
            end = limit
        elif inside[min_samples - 1] >= end:
            end = min(float(np.nextafter(inside[min_samples - 1], np.inf)), limit)
    return offsets[offsets < end], end


async def open_loop(
    target: LoadTarget,
    requests: Sequence[bytes],
    rate: float,
    warmup_s: float,
    duration_s: float,
    arrival: str = "poisson",
    seed: int = 0,
    max_outstanding: int = 256,
    timeout_s: float = 30.0,
    cpu_probe: CpuProbe = harness_cpu_sample,
    progress: Callable[[float], None] | None = None,
    t0: float | None = None,
    min_samples: int = 0,
    max_duration_s: float | None = None,
) -> LoadResult:
    """Requests at the intended times of ``arrival_offsets``; at most ``max_outstanding`` in flight
    (beyond it the generator waits, falls behind, and says so). The window is extended until
    ``min_samples`` requests are scheduled inside it, within ``longest_window_s``."""
    offsets, window_end = open_loop_window(
        rate, warmup_s, duration_s, arrival, seed, min_samples, max_duration_s
    )
    col = _Collector()
    slots = asyncio.Semaphore(max_outstanding)
    tasks: set[asyncio.Task[None]] = set()
    n_frames = len(requests)
    cpu_start = cpu_probe()
    t0 = time.perf_counter() if t0 is None else t0  # times are seconds since t0

    async def one(i: int, intended: float) -> None:
        try:
            sent = time.perf_counter() - t0
            code, resp = await _call(target, requests[i % n_frames], timeout_s, col)
            col.add(intended, sent, time.perf_counter() - t0, code, resp)
        finally:
            slots.release()

    try:
        for i, offset in enumerate(offsets.tolist()):
            delay = offset - (time.perf_counter() - t0)
            if delay > 0:
                await asyncio.sleep(delay)
            await slots.acquire()
            task = asyncio.create_task(one(i, offset))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            if progress and i % 64 == 0:
                progress(time.perf_counter() - t0)
        # The window is a span of time, not a list of sends: the CPU and throughput figures divide by
        # it, so the run lasts to its end even when the last send (or none) came long before.
        rest = window_end - (time.perf_counter() - t0)
        if rest > 0:
            await asyncio.sleep(rest)
        if tasks:
            await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
    cpu_end = cpu_probe()
    samples = col.samples()
    window_start = warmup_s
    schedule = schedule_report(samples, window_start, window_end, rate)
    schedule.update(
        {"rate_target_inf_per_s": rate, "arrival": arrival, "seed": seed, "max_outstanding": max_outstanding}
    )
    return LoadResult(
        samples, window_start, window_end, cpu_start, cpu_end, col.errors, col.replayed, schedule
    )


def schedule_report(
    samples: Samples, window_start: float, window_end: float, rate: float
) -> dict[str, object]:
    """How well an open-loop generator kept its schedule inside the window: send lag, and the share of
    the requests scheduled in the window that were actually sent in it (Poisson counts vary by chance,
    so the schedule, not λ × duration, is the yardstick)."""
    mask = samples.measured(window_start, window_end)
    lag_ms = (samples.sent_s[mask] - samples.intended_s[mask]) * 1e3
    span = window_end - window_start
    scheduled = int(mask.sum())
    sent_in_window = int(((samples.sent_s >= window_start) & (samples.sent_s < window_end)).sum())
    fraction = sent_in_window / scheduled if scheduled else 0.0
    lag_p99 = float(np.percentile(lag_ms, 99)) if lag_ms.size else 0.0
    return {
        "scheduled_in_window": scheduled,
        "scheduled_rate_inf_per_s": scheduled / span if span > 0 else 0.0,
        "sent_in_window": sent_in_window,
        "sent_fraction_of_schedule": fraction,
        "send_lag_p50_ms": float(np.percentile(lag_ms, 50)) if lag_ms.size else 0.0,
        "send_lag_p99_ms": lag_p99,
        "send_lag_max_ms": float(lag_ms.max()) if lag_ms.size else 0.0,
        "generator_behind_schedule": bool(lag_p99 > BEHIND_LAG_P99_MS or fraction < BEHIND_RATE_FRACTION),
        "rate_not_offered": bool(fraction < BEHIND_RATE_FRACTION),
    }
