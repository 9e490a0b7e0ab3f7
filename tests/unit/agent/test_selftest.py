"""The start-up self-test: every context on its own frame at once, against its solo runs."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from helpers.echo_contexts import SIZE, EchoBackend, EchoContext

from npudure.agent import selftest
from npudure.backends import create_backend
from npudure.backends.base import Context, ContextResult
from npudure.config import AgentConfig

pytestmark = pytest.mark.timeout(30)


def test_frames_are_distinct_and_seeded() -> None:
    a, b = selftest.frames(3, SIZE), selftest.frames(3, SIZE)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert len({f.tobytes() for f in a}) == 3 and a[0].shape == (SIZE, SIZE, 3)


def test_contexts_of_their_own_pass() -> None:
    backend = EchoBackend(8)
    passed = selftest.run(backend.contexts, SIZE)
    assert passed.contexts == 8 and passed.seconds < 1
    assert all(ctx.runs == 2 for ctx in backend.contexts)  # one frame together, one alone
    assert passed.describe().startswith("self-test passed: 8 context(s) each answered its own frame")


def test_contexts_sharing_state_are_refused_naming_one() -> None:
    with pytest.raises(selftest.SelfTestFailed) as info:
        selftest.run(EchoBackend(4, shared=True).contexts, SIZE)
    text = str(info.value)
    assert text.startswith("self-test: context ") and "when all 4 contexts ran at once" in text
    assert "the answer to context " in text and "share state; refusing to start" in text
    assert "\n" not in text


class _Failing(Context):
    def run(self, image: np.ndarray) -> ContextResult:
        raise RuntimeError("NPU timeout\nmore detail")


class _Stuck(Context):
    def __init__(self) -> None:
        self.release = threading.Event()

    def run(self, image: np.ndarray) -> ContextResult:
        self.release.wait(10)
        raise RuntimeError("released")


def test_a_failing_or_silent_context_is_named() -> None:
    with pytest.raises(
        selftest.SelfTestFailed, match=r"^self-test: context 1 failed on its frame: NPU timeout$"
    ):
        selftest.run([EchoContext(), _Failing()], SIZE)
    stuck = _Stuck()
    try:
        silent = r"context 0 did not answer its frame within 0\.2 s$"
        with pytest.raises(selftest.SelfTestFailed, match=silent):
            selftest.run([stuck, EchoContext()], SIZE, timeout_s=0.2)
    finally:
        stuck.release.set()


def test_the_sim_runs_on_a_short_twin_so_a_slow_lab_board_starts_fast() -> None:
    # Time scale 20 (the lab's): a frame is ~250 ms, so 8 contexts' solo runs alone would take 2 s.
    config = AgentConfig(node_name="b", backend="sim", contexts=8, sim={"time_scale": 20, "cpu_cap_mhz": 600})
    backend = create_backend(config)
    twin, made = selftest.target(config, backend)
    assert made and twin is not backend and len(twin.contexts) == 8
    assert twin.config.time_scale == selftest.SIM_TWIN_TIME_SCALE and twin.config.synthetic_detections > 0  # type: ignore[attr-defined]
    start = time.perf_counter()
    selftest.run(twin.contexts, twin.input_size)
    assert time.perf_counter() - start < 1.0
    twin.close()
    assert selftest.target(AgentConfig(node_name="b", backend="onnx", model="m.onnx"), backend) == (
        backend,
        False,
    )
