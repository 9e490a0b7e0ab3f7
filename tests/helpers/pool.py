"""Fakes for the agent's worker pool: an NPU context that blocks until its gate opens, one that answers at
once (and a backend of one), and a wait helper."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import numpy as np

from npudure.backends.base import NO_DETECTIONS, Backend, Context, ContextResult

# The fake contexts never look at the pixels: any frame the pool accepts will do.
FRAME = np.zeros((4, 4, 3), dtype=np.uint8)


class GatedContext(Context):
    """Blocks in ``run`` while its gate is closed; records overlap, so sharing a context would show.

    Pass a ``gate`` to share one between contexts (a hang that several contexts are stuck in), or use
    the context's own. ``started`` is set once a frame is inside ``run``.
    """

    def __init__(self, name: str = "ctx", gate: threading.Event | None = None) -> None:
        self.name = name
        self.gate = gate if gate is not None else threading.Event()
        self.started = threading.Event()
        self.active = 0
        self.max_active = 0
        self.runs = 0
        self.closed = False
        self._lock = threading.Lock()

    def run(self, image: np.ndarray) -> ContextResult:
        assert not self.closed, f"{self.name} ran after it was released"
        with self._lock:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        self.started.set()
        try:
            assert self.gate.wait(30), f"the test never opened {self.name}'s gate"
            self.runs += 1
            return ContextResult(NO_DETECTIONS, 0.0, 0.0, 0.0)
        finally:
            with self._lock:
                self.active -= 1

    def close(self) -> None:
        self.closed = True


class IdleContext(Context):
    """Answers every frame at once, with no detections."""

    def run(self, image: np.ndarray) -> ContextResult:
        return ContextResult(NO_DETECTIONS, 0.0, 0.0, 0.0)


class IdleBackend(Backend):
    """One idle context; not emulated (so an agent treats it as real hardware, e.g. for cpufreq)."""

    name = "idle"

    def __init__(self) -> None:
        self._contexts: list[Context] = [IdleContext()]

    @property
    def contexts(self) -> list[Context]:
        return self._contexts


async def wait_for(predicate: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Poll ``predicate`` on the event loop until it holds; fail the test after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)
