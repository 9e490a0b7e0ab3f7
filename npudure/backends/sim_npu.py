"""The emulated NPU's model (sim v2): the phases of one inference, their calibration, and the
board's throughput in closed form.

A board is ``cores`` NPU cores, one submission path every core's jobs cross, and a CPU-side phase per
inference that holds a context but no NPU resource. Each inference of a context passes, in turn:

1. the CPU phase (``CPU_PHASE_S``, spread ``CPU_PHASE_CV``): input set, output fetch and the
   runtime's own CPU work; contexts overlap freely in it (an infinite server);
2. the submission path (``SUBMIT_S`` of work): one path, shared by processor sharing (m jobs in it
   each progress at 1/m): why a second core is worth 1.51x, not 2x;
3. a core (``CORE_S`` of work): ``cores`` cores shared by processor sharing (m jobs each progress at
   min(1, cores/m)), as the runtime's CORE_AUTO spreads jobs over them.

Why processor sharing: a closed network of delay and processor-sharing stations has a product-form
stationary distribution whose throughput depends only on the mean times (BCMP), so
:func:`throughput_inf_s` is exact whatever the phases' spread, once the contexts have mixed (from a
simultaneous start, within about a hundred frames), and the real-time emulation below agrees with it.

Calibration (docs/sim-model.md): the reference's RK3576, one context per thread, CORE_AUTO, served
16.7 / 36.2 / 52.4 / 72.9 inf/s at 1 / 2 / 4 / 8 contexts (ratios 0.229 / 0.497 / 0.719 / 1.0), one
core against two at 8 contexts 1.51x, and 161.5 inf/s INT8 at 8. The three times below were fitted to
those five figures; :data:`CALIBRATION` is what every report names.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
import weakref

# Fitted (seconds of work at time scale 1, no CPU cap). Model vs reference: 0.237 / 0.453 / 0.763 /
# 1.0 (+3.7% / -8.8% / +6.2%), 1.51x one core against two, 161.4 inf/s at 8 contexts; 176 at most.
CPU_PHASE_S = 0.0112
SUBMIT_S = 0.00567
CORE_S = 0.00922
# One frame alone on an idle board (a single context's latency) at time scale 1: 26.1 ms.
FRAME_ALONE_S = CPU_PHASE_S + SUBMIT_S + CORE_S
# The CPU phase's spread (lognormal coefficient of variation), chosen, not measured: a board's CPU
# work varies from frame to frame, and that is what keeps the contexts from marching in lockstep (with
# identical phases they would enter the shared path together forever and serve half the model's
# throughput). The mean throughput does not depend on it.
CPU_PHASE_CV = 0.3
CALIBRATION = (
    "sim v2: RK3576 as measured by the reference (contexts 1/2/4/8 -> 0.229/0.497/0.719/1.0 of "
    "161.5 inf/s INT8, one core vs two 1.51x); beyond 8 contexts a model parameter, not a measurement"
)
# Two NPU cores: the RK3576 the calibration is for.
CALIBRATED_CORES = 2
CALIBRATED_CONTEXTS = 8
_DONE_EPS = 1e-12


def throughput_inf_s(contexts: int, cores: int = CALIBRATED_CORES, scale: float = 1.0) -> float:
    """The board's mean throughput with ``contexts`` always busy, every phase's time times ``scale``.

    Exact for the model: the product form sums, over every split of the contexts between the three
    phases, ``c^a/a! * s^b * prod(n/min(i, cores))``; throughput is P(submission path busy) / s.
    Times are taken relative to the core's, which keeps the terms in range up to 64 contexts.
    """
    if contexts < 1 or cores < 1:
        raise ValueError("contexts and cores must be at least 1")
    c, s = CPU_PHASE_S / CORE_S, SUBMIT_S / CORE_S
    total = busy = 0.0
    for on_path in range(contexts + 1):
        for on_cores in range(contexts + 1 - on_path):
            in_cpu = contexts - on_path - on_cores
            weight = c**in_cpu / math.factorial(in_cpu) * s**on_path
            for i in range(1, on_cores + 1):
                weight /= min(i, cores)
            total += weight
            if on_path:
                busy += weight
    return busy / total / (s * CORE_S * scale)


class FluidShare:
    """The bookkeeping of processor sharing, without threads or clocks: ``units`` of capacity shared
    by the jobs in it, each progressing at min(1, units/m) with m jobs in.
    Invariant: ``left`` holds exactly the unfinished jobs, each with its work left at time ``t``."""

    def __init__(self, units: int, t: float = 0.0) -> None:
        if units < 1:
            raise ValueError("a shared server needs at least one unit")
        self.units = units
        self.t = t
        self.left: dict[int, float] = {}
        self.finished_at: dict[int, float] = {}

    def rate(self) -> float:
        """Each job's progress per second now (1.0 with nothing in)."""
        return min(1.0, self.units / len(self.left)) if self.left else 1.0

    def advance(self, now: float) -> bool:
        """Run the model up to ``now``; True when a job finished on the way (its time in finished_at)."""
        finished = False
        while self.left:
            rate = self.rate()
            least = min(self.left.values())
            end = self.t + least / rate
            if end > now:
                spent = (now - self.t) * rate
                for job in self.left:
                    self.left[job] -= spent
                break
            for job in list(self.left):
                self.left[job] -= least
                if self.left[job] <= _DONE_EPS:
                    del self.left[job]
                    self.finished_at[job] = end
            self.t = end
            finished = True
        self.t = max(self.t, now)
        return finished

    def add(self, job: int, work_s: float, now: float) -> None:
        self.advance(now)
        self.left[job] = work_s


class SharedServer:
    """Processor sharing in real time (:class:`FluidShare` on the wall clock, callers blocked).

    The model runs forward whenever a caller looks at it, so a job leaves at its model time even if
    its thread wakes late; the caller gets that model duration back, and the time it actually spent
    shows the host's lag.
    """

    def __init__(self, units: int) -> None:
        self._fluid = FluidShare(units, time.perf_counter())
        self._cond = threading.Condition()
        self._ids = itertools.count()

    def serve(self, work_s: float) -> float:
        """Hold the caller until ``work_s`` is done at its share; the model's duration of it."""
        fluid = self._fluid
        with self._cond:
            start = time.perf_counter()
            job = next(self._ids)
            fluid.add(job, work_s, start)
            self._cond.notify_all()  # everyone's share just shrank
            while True:
                if fluid.advance(time.perf_counter()):
                    self._cond.notify_all()  # the rest's shares just grew
                if job in fluid.finished_at:
                    return fluid.finished_at.pop(job) - start
                self._cond.wait(fluid.left[job] / fluid.rate())


class BoardNpu:
    """One board's NPU: its one submission path and its cores, shared by every context of every model
    the board serves (two models' pools share one NPU; they do not each get their own)."""

    def __init__(self, cores: int) -> None:
        self.cores_count = cores
        self.submission = SharedServer(1)
        self.cores = SharedServer(cores)
        self._contexts = itertools.count()

    def next_context(self) -> int:
        """A number for a new context, unique on the board: each context's jitter its own, also across
        models (with per-model numbers two models' contexts drew the same times and never mixed)."""
        return next(self._contexts)


# The NPU of each board in this process, by board name: an agent's models (and the self-test's spare
# backend) find their board's; agents started in one process (tests) keep their own. Held by the
# backends that use it, so a board's NPU goes with its last backend.
_BOARDS: weakref.WeakValueDictionary[str, BoardNpu] = weakref.WeakValueDictionary()
_BOARDS_LOCK = threading.Lock()


def board_npu(board: str, cores: int) -> BoardNpu:
    """The NPU of board ``board`` (made with ``cores`` cores when it has none yet)."""
    with _BOARDS_LOCK:
        npu = _BOARDS.get(board)
        if npu is None or npu.cores_count != cores:
            npu = _BOARDS[board] = BoardNpu(cores)
        return npu
