"""The start-up self-test: each context answers its own frame while every context runs at once.

Distinct seeded frames go through all the contexts together (threads released by one barrier), then
each frame again through the same context alone; the two outputs must be the same bytes
(``Context.self_test_output``: the raw output tensors of model backends). The reference's RKNNLite
context shared between threads returned another thread's answer 200 of 200 times with no API error:
contexts that share state fail here, and the agent refuses to start (exit 78) instead of serving
wrong boxes.

Cost: one frame per context at once, then one frame per context alone. An emulated board runs it on a
twin (:func:`target`) whose modelled frames are short: the lab's boards run at time scale ~20, where a
frame takes ~250 ms and 8 contexts' solo runs alone would add 2 s to every agent start.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from npudure.backends import Backend, Context, create_backend
from npudure.config import AgentConfig

SEED = 0x5E1F7E57
# The sim twin's time scale: a frame ~2.5 ms uncapped, ~10 ms at the deepest CPU cap (x3.93).
SIM_TWIN_TIME_SCALE = 0.2
# Synthetic boxes seeded by the frame's pixels, so the sim's outputs differ between frames (its real
# configuration may have none, and "no boxes" equals "no boxes" whichever frame it came from).
SIM_TWIN_DETECTIONS = 5


class SelfTestFailed(Exception):
    """A context answered wrongly (or not at all) in the start-up self-test; one line, naming it."""


@dataclass(frozen=True)
class Passed:
    contexts: int
    seconds: float

    def describe(self) -> str:
        return (
            f"self-test passed: {self.contexts} context(s) each answered its own frame ({self.seconds:.2f} s)"
        )


def frames(count: int, size: int) -> list[np.ndarray]:
    """``count`` distinct seeded RGB frames of ``size`` x ``size``."""
    return [
        np.random.default_rng([SEED, i]).integers(0, 256, (size, size, 3), dtype=np.uint8)
        for i in range(count)
    ]


def target(config: AgentConfig, backend: Backend) -> tuple[Backend, bool]:
    """(the backend to self-test, whether it is a twin the caller must close). The sim's contexts are one
    class whatever the time scale: its twin has the same count with short frames and synthetic boxes."""
    if config.backend != "sim":
        return backend, False
    sim = config.sim.model_copy(
        update={
            "time_scale": min(config.sim.time_scale, SIM_TWIN_TIME_SCALE),
            "synthetic_detections": config.sim.synthetic_detections or SIM_TWIN_DETECTIONS,
            "jitter_cv": 0.0,
        }
    )
    return create_backend(config.model_copy(update={"sim": sim}), len(backend.contexts)), True


def _output(ctx: Context, frame: np.ndarray) -> bytes | BaseException:
    try:
        return ctx.self_test_output(frame)
    except Exception as exc:
        return exc


def _on_threads(jobs: list[tuple[Context, np.ndarray]], timeout_s: float, at_once: bool) -> list[object]:
    """Each (context, frame) on a thread of its own: all released at once by a barrier, or one after
    the other. An entry is the output, the error, or None if it did not answer within ``timeout_s``
    (a hung NPU call cannot be interrupted: its daemon thread is left behind)."""
    results: list[object] = [None] * len(jobs)
    barrier = threading.Barrier(len(jobs)) if at_once else None

    def work(i: int) -> None:
        if barrier is not None:
            try:
                barrier.wait(timeout_s)
            except threading.BrokenBarrierError:
                results[i] = TimeoutError("the other contexts did not start")
                return
        results[i] = _output(*jobs[i])

    threads = [
        threading.Thread(target=work, args=(i,), name=f"selftest{i}", daemon=True) for i in range(len(jobs))
    ]
    deadline = time.monotonic() + timeout_s
    for thread in threads:
        thread.start()
        if barrier is None:
            thread.join(max(0.0, deadline - time.monotonic()))
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return results


def _check(results: list[object], timeout_s: float) -> None:
    for i, result in enumerate(results):
        if result is None:
            raise SelfTestFailed(f"self-test: context {i} did not answer its frame within {timeout_s:g} s")
        if isinstance(result, BaseException):
            raise SelfTestFailed(f"self-test: context {i} failed on its frame: {_first_line(result)}")


def run(contexts: Sequence[Context], size: int, timeout_s: float = 60.0) -> Passed:
    """Raise SelfTestFailed naming the first context whose output alongside the others differs from its
    solo run of the same frame (or that failed, or did not answer within ``timeout_s`` per round)."""
    start = time.perf_counter()
    jobs = list(zip(contexts, frames(len(contexts), size), strict=True))
    together = _on_threads(jobs, timeout_s, at_once=True)
    _check(together, timeout_s)
    alone = _on_threads(jobs, timeout_s, at_once=False)
    _check(alone, timeout_s)
    n = len(contexts)
    for i, (got, solo) in enumerate(zip(together, alone, strict=True)):
        if got != solo:
            others = [j for j in range(n) if j != i and alone[j] == got]
            whose = f"the answer to context {others[0]}'s frame" if others else "a different answer"
            raise SelfTestFailed(
                f"self-test: context {i} returned {whose} when all {n} contexts ran at once, not the answer "
                "of its solo run of the same frame: the contexts share state; refusing to start"
            )
    return Passed(n, time.perf_counter() - start)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__
