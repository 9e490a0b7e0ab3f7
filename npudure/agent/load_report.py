"""What proxyless clients read from a board: ORCA per-call load reports and the serving decision.

**Load report.** Every Infer reply carries the trailer ``endpoint-load-metrics-bin``: a serialized
``xds.data.orca.v3.OrcaLoadReport`` with ``rps_fractional`` (requests completed per second) and
``application_utilization`` (the busy fraction of the NPU contexts), both over the last
``WINDOW_S`` seconds (shorter right after start-up). gRPC's ``weighted_round_robin`` weighs each
board by rps / utilization: completions / (busy seconds / contexts) = contexts / mean service time,
which is the board's capacity whatever load it gets; a slowed board gets proportionally fewer requests.

**Serving.** The ``npudure.v1.Inference`` health service is NOT_SERVING while any context is hung
(the board's own finding) or while the scheduler has a reason (drained, inactive, hot) set through
``Node.SetServing``; proxyless clients health-check that service. The overall ("") service reflects
only the board's own health, which the scheduler's monitor reads: a drained board is not a DOWN one.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable

from xds.data.orca.v3 import orca_load_report_pb2

ORCA_TRAILER = "endpoint-load-metrics-bin"
WINDOW_S = 1.0  # long enough for a stable weight at ~10 req/s, short enough to follow a CPU cap
# Below this the ratio rps / utilization is noise; gRPC treats utilization 0 as "no report".
MIN_UTILIZATION = 1e-3


class LoadMeter:
    """Completions and busy context-seconds over a sliding window (the lock: NodeStatus is built on a
    worker thread while replies are recorded on the event loop)."""

    def __init__(self, contexts: int, window_s: float = WINDOW_S) -> None:
        self.contexts = max(1, contexts)
        self.window_s = window_s
        self.started = time.monotonic()
        self._done: deque[tuple[float, float]] = deque()  # (completed at, busy seconds)
        self._busy_sum = 0.0
        self._lock = threading.Lock()

    def record(self, busy_s: float, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        with self._lock:
            self._done.append((now, busy_s))
            self._busy_sum += busy_s
            self._prune(now)

    def _prune(self, now: float) -> None:
        horizon = now - self.window_s
        while self._done and self._done[0][0] < horizon:
            self._busy_sum -= self._done.popleft()[1]

    def snapshot(self, now: float | None = None) -> tuple[float, float]:
        """(requests per second, utilization 0..1) over the window."""
        now = time.monotonic() if now is None else now
        with self._lock:
            self._prune(now)
            done, busy = len(self._done), self._busy_sum
        span = min(self.window_s, max(now - self.started, 1e-3))
        rps = done / span
        # Work finished in the window may have started before it: cap at fully busy.
        utilization = min(1.0, max(0.0, busy) / (span * self.contexts))
        return rps, utilization

    def report(self, now: float | None = None) -> bytes:
        rps, utilization = self.snapshot(now)
        # xds ships no type information: the message is Any to mypy.
        data: bytes = orca_load_report_pb2.OrcaLoadReport(
            rps_fractional=rps, application_utilization=max(utilization, MIN_UTILIZATION)
        ).SerializeToString()
        return data


class ServingState:
    """The board's own reason (a hung context) plus the scheduler's reasons; serving when there are none."""

    def __init__(self) -> None:
        self.hung = False
        self.operator: tuple[str, ...] = ()

    def set_operator(self, reasons: Iterable[str]) -> None:
        self.operator = tuple(sorted({r.strip() for r in reasons if r.strip()}))

    @property
    def reasons(self) -> list[str]:
        return (["hung"] if self.hung else []) + list(self.operator)

    @property
    def serving(self) -> bool:
        return not self.reasons
