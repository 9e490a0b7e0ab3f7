"""``sim``: an emulated RK3576 board. It does no real compute; every figure it feeds is emulated.

The NPU is sim v2 (``npudure.backends.sim_npu``, docs/sim-model.md): ``npu_cores`` cores, one
submission path they share and a CPU-side phase per inference that holds a context but no core,
calibrated to the reference's contexts table (1 / 2 / 4 / 8 contexts -> 0.229 / 0.497 / 0.719 / 1.0 of
161.5 inf/s, one core vs two 1.51x). Each phase's time is multiplied by:

* ``cap_factor(cap)``: the reference's CPU-cap ladder, per-board latency spread with one board's CPU
  clock capped (round robin, fan on): 2208 MHz -> 1.12, 1608 -> 1.18, 1200 -> 1.33, 1008 -> 1.79,
  816 -> 2.26, 600 -> 3.93; linear in MHz between rungs, 3.93 below 600 and 1.12 at or above 2208.
  No cap -> 1.0. (The 1.12 at 2208, the RK3576's big-core maximum, is the spread the reference still
  measured at full clock; the model keeps it rather than rescale the ladder.)
* ``time_scale``, so a 2-core test machine can host many emulated boards without itself becoming the
  bottleneck (time_scale 10 -> 16.15 inf/s per board at 8 contexts);
* lognormal jitter (mean 1): the CPU phase's own spread (``sim_npu.CPU_PHASE_CV``) and, on the NPU
  phases, ``jitter_cv`` per frame; neither moves the mean throughput (the model is insensitive to them).

* NPU input set: a real copy of the frame into the context's own input buffer (what handing a frame
  to NPU memory costs on the board's CPU), timed apart from inference.
* An injected hang stops the contexts that exist at injection time (a hung NPU context); contexts
  created afterwards (the agent's recovery) work, and FAULT_NONE releases the hung calls.

What it does not model: thermal throttling over time, the NPU's own clock, network cost (that is real:
frames still cross real gRPC sockets), and detections: it returns none, unless
``sim.synthetic_detections`` is set — then SYNTHETIC detections (``synthetic_detections``), made-up
boxes seeded by the frame's pixels, never a model's output: they let box handling (the HTTP API's
inverse letterbox, labels, thresholds) be checked end to end.

It knows when it falls behind: each frame's modelled time and the time it actually took (the sleeps
plus the wait to get a CPU and the GIL back) are summed into two cumulative counters the agent reports
(``NodeStatus.emulation_model_s_total`` / ``emulation_actual_s_total``). On a saturated host the
actual total runs ahead of the model, so lag over any window = Δactual / Δmodel − 1, and the harness marks
such a run invalid: an emulated board that is late measures the host, not the board.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
import zlib
from collections.abc import Sequence

import numpy as np

from npudure.backends import sim_npu
from npudure.backends.base import INPUT_SIZE, NO_DETECTIONS, Backend, Context, ContextResult
from npudure.config import SimConfig
from npudure.vision.labels import COCO80

MAX_HANG_S = 600.0

# (cap MHz, per-board latency spread) from the reference cap ladder, ascending in MHz.
CAP_LADDER: tuple[tuple[int, float], ...] = (
    (600, 3.93),
    (816, 2.26),
    (1008, 1.79),
    (1200, 1.33),
    (1608, 1.18),
    (2208, 1.12),
)


def synthetic_detections(image: np.ndarray, limit: int, classes: int = 80) -> np.ndarray:
    """SYNTHETIC detections, not a model's: 1..``limit`` boxes (x1, y1, x2, y2, score, class_id rows in
    the pixels of the square ``image``, scores 0.25-0.95, class ids below ``classes``) drawn from a
    generator seeded by a sample of the frame's pixels, so the same frame always gets the same boxes and
    different frames (almost always) different ones."""
    if limit <= 0:
        return NO_DETECTIONS
    seed = zlib.crc32(np.ascontiguousarray(image[::7, ::7]).data)
    rng = np.random.default_rng([0x73796E74, seed])  # namespaced apart from the frame and model seeds
    side = image.shape[0]
    n = int(rng.integers(1, limit + 1))
    xy = rng.uniform(0, side * 0.8, (n, 2))
    wh = rng.uniform(side * 0.03, side * 0.4, (n, 2))
    corners = np.clip(np.concatenate([xy, xy + wh], axis=1), 0, side)
    scores = rng.uniform(0.25, 0.95, (n, 1))
    ids = rng.integers(0, classes, (n, 1))
    return np.concatenate([corners, scores, ids], axis=1).astype(np.float32)


def cap_factor(cap_mhz: int | None) -> float:
    """Slow-down of service time for a board whose CPU clock is capped at ``cap_mhz``."""
    if cap_mhz is None:
        return 1.0
    if cap_mhz <= CAP_LADDER[0][0]:
        return CAP_LADDER[0][1]
    for (lo_mhz, lo_f), (hi_mhz, hi_f) in itertools.pairwise(CAP_LADDER):
        if cap_mhz <= hi_mhz:
            t = (cap_mhz - lo_mhz) / (hi_mhz - lo_mhz)
            return lo_f + t * (hi_f - lo_f)
    return CAP_LADDER[-1][1]


class _SimContext(Context):
    def __init__(self, backend: SimBackend) -> None:
        self._backend = backend
        # Seeded by a number unique on the board (not the pool slot): two models' contexts draw apart.
        self._rng = np.random.default_rng(backend.config.seed * 1000 + backend.npu.next_context())
        self._input: np.ndarray | None = None
        self.hung = False

    def _jitter(self, cv: float) -> float:
        """Lognormal, mean 1, coefficient of variation ``cv`` (1.0 when it is 0)."""
        if cv <= 0:
            return 1.0
        sigma = math.sqrt(math.log1p(cv * cv))
        return float(self._rng.lognormal(-sigma * sigma / 2, sigma))

    def run(self, image: np.ndarray) -> ContextResult:
        c0 = time.thread_time_ns()
        t0 = time.perf_counter()
        if self._input is None or self._input.shape != image.shape:
            self._input = np.empty_like(image)
        np.copyto(self._input, image)
        npu_input_s = time.perf_counter() - t0
        c1 = time.thread_time_ns()
        start = time.perf_counter()
        scale = self._backend.phase_scale()
        npu_jitter = self._jitter(self._backend.config.jitter_cv)
        cpu_s = sim_npu.CPU_PHASE_S * scale * self._jitter(sim_npu.CPU_PHASE_CV)
        time.sleep(cpu_s)  # releases the GIL, as RKNNLite.inference() does
        model_s = cpu_s
        model_s += self._backend.submission.serve(sim_npu.SUBMIT_S * scale * npu_jitter)
        model_s += self._backend.cores.serve(sim_npu.CORE_S * scale * npu_jitter)
        self._backend.record_service(model_s, time.perf_counter() - start)
        # An injected NPU hang: the call does not return until the fault is cleared (bounded).
        while self.hung and time.perf_counter() - start < MAX_HANG_S:
            time.sleep(0.05)
        inference_s = time.perf_counter() - start
        t1 = time.perf_counter()
        c2 = time.thread_time_ns()
        limit = self._backend.config.synthetic_detections
        detections = synthetic_detections(self._input, limit, len(self._backend.class_names))
        cpu = {"npu_input": c1 - c0, "postprocess": time.thread_time_ns() - c2}
        return ContextResult(detections, 0.0, inference_s, time.perf_counter() - t1, npu_input_s, cpu)


class SimBackend(Backend):
    name = "sim"
    emulated = True

    def __init__(
        self,
        contexts: int,
        config: SimConfig,
        npu_cores: int = sim_npu.CALIBRATED_CORES,
        board: str | None = None,
        input_size: int | None = None,
        class_names: Sequence[str] | None = None,
    ) -> None:
        self.config = config
        # A user's model as the config names it (its size and names, from `npudure model check` on the
        # controller): frames are letterboxed to it and detections carry its class ids. The NPU time
        # stays YOLOv8n's at 640, the calibrated figure.
        self._input_size = input_size or INPUT_SIZE
        self._names = tuple(class_names) if class_names else COCO80
        self.npu_cores = npu_cores
        # The board's NPU, shared by every context of every model on ``board`` (and by those made to
        # replace hung ones); a backend without a board name has an NPU of its own.
        self.npu = sim_npu.board_npu(board, npu_cores) if board else sim_npu.BoardNpu(npu_cores)
        self.submission = self.npu.submission
        self.cores = self.npu.cores
        self._cap = config.cpu_cap_mhz
        self._lock = threading.Lock()
        self._model_s_total = 0.0
        self._actual_s_total = 0.0
        self._contexts: list[Context] = [_SimContext(self) for _ in range(contexts)]
        # Every context ever made, so FAULT_NONE also frees the calls of replaced ones.
        self._made: list[_SimContext] = list(self._contexts)  # type: ignore[arg-type]

    @property
    def contexts(self) -> list[Context]:
        return self._contexts

    @property
    def runtime_version(self) -> str:
        return "sim-rk3576-2 (emulated)"

    @property
    def cpu_cap_mhz(self) -> int | None:
        return self._cap

    def set_cpu_cap(self, mhz: int | None) -> None:
        with self._lock:
            self._cap = mhz

    @property
    def hung(self) -> bool:
        return any(ctx.hung for ctx in self._made)

    def new_context(self, index: int) -> Context:
        ctx = _SimContext(self)  # a new jitter stream, whatever slot it fills
        with self._lock:
            self._made.append(ctx)
        return ctx

    def inject_fault(self, hang: bool) -> None:
        with self._lock:
            for ctx in self._made:
                ctx.hung = hang

    def record_service(self, model_s: float, actual_s: float) -> None:
        """Add one frame's modelled and achieved service time (an injected hang is not counted)."""
        with self._lock:
            self._model_s_total += model_s
            self._actual_s_total += actual_s

    def emulation_totals(self) -> tuple[float, float] | None:
        with self._lock:
            return self._model_s_total, self._actual_s_total

    def phase_scale(self) -> float:
        """What every phase's time is multiplied by: the CPU cap's slow-down and the time scale."""
        return cap_factor(self._cap) * self.config.time_scale

    def mean_service_s(self) -> float:
        """One frame's model time with the board otherwise idle (a single context's latency)."""
        return sim_npu.FRAME_ALONE_S * self.phase_scale()

    def capacity_inf_s(self) -> float:
        """Mean throughput of this emulated board with every context busy (exact for the model)."""
        return sim_npu.throughput_inf_s(len(self._contexts), self.npu_cores, self.phase_scale())
