"""CPU time the agent spends per request stage, by the kind of thread that spent it.

Thread CPU time (``CLOCK_THREAD_CPUTIME_ID``), not wall time: a stage that waits (the NPU, a free
context) costs nothing here, and a stage that holds a core shows what it takes from the board's CPU.

``thread`` tells the event-loop thread (``loop``: every Python step of every request is serialized
there behind the GIL, so its total caps the agent at one core's worth of work) from the decode and NPU
worker threads (``worker``: they hold the GIL too while in Python, but release it in Pillow's decoder,
numpy's large copies and the NPU call). The event-loop thread's whole CPU time (gRPC callbacks,
asyncio, everything not in a named stage) is read from its own per-thread clock at scrape time.

Only the event loop adds to the totals (workers hand their figures back with their results), so the
counters need no lock; each stage costs one or two ``thread_time_ns()`` reads (~0.1-0.5 µs each).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

# (TLS fleets: the peer's certificate against the CRL →) receive/parse → checks → decode + letterbox →
# NPU input → (pre/)inference/post → reply.
STAGES = (
    "peer_check",
    "parse",
    "check",
    "decode",
    "letterbox",
    "preprocess",
    "npu_input",
    "inference",
    "postprocess",
    "reply",
)
THREADS = ("loop", "worker")

now_ns = time.thread_time_ns  # this thread's CPU clock


class CpuAccount:
    def __init__(self) -> None:
        self._ns = {(s, t): 0 for s in STAGES for t in THREADS}
        self.frames = 0
        self._loop_clock: int | None = None

    def bind_loop(self) -> None:
        """Call on the event-loop thread: its CPU clock is read at scrape time from any thread."""
        try:
            self._loop_clock = time.pthread_getcpuclockid(threading.get_ident())
        except (AttributeError, OSError):  # not Linux/POSIX: the loop total is then not reported
            self._loop_clock = None

    def add(self, stage: str, thread: str, ns: int) -> None:
        self._ns[(stage, thread)] += ns

    def add_worker(self, stages: dict[str, int]) -> None:
        for stage, ns in stages.items():
            self._ns[(stage, "worker")] += ns

    def seconds(self) -> dict[tuple[str, str], float]:
        return {k: v / 1e9 for k, v in self._ns.items()}

    def loop_seconds(self) -> float | None:
        if self._loop_clock is None:
            return None
        try:
            return time.clock_gettime(self._loop_clock)
        except OSError:
            return None


class CpuCollector(Collector):
    """``npudure_agent_stage_cpu_seconds_total{stage,thread}`` and the loop thread's total."""

    def __init__(self, account: CpuAccount) -> None:
        self._account = account

    def collect(self) -> Iterator[CounterMetricFamily]:
        stages = CounterMetricFamily(
            "npudure_agent_stage_cpu_seconds",
            "Thread CPU seconds per request stage, on the event-loop thread or a worker thread",
            labels=["stage", "thread"],
        )
        for (stage, thread), seconds in self._account.seconds().items():
            stages.add_metric([stage, thread], seconds)
        yield stages
        yield CounterMetricFamily(
            "npudure_agent_stage_cpu_frames",
            "Frames answered OK whose stages are counted in npudure_agent_stage_cpu_seconds",
            value=self._account.frames,
        )
        loop = self._account.loop_seconds()
        if loop is not None:
            yield CounterMetricFamily(
                "npudure_agent_loop_thread_cpu_seconds",
                "CPU seconds of the event-loop thread (GIL-serialized: gRPC callbacks, asyncio, stages)",
                value=loop,
            )
