"""Contexts whose answer is the frame they last received, after a short sleep: two threads sharing one
(or sharing its state) get each other's answers, as the reference's shared RKNNLite context did."""

from __future__ import annotations

import threading
import time
import zlib

import numpy as np

from npudure.backends.base import Backend, Context, ContextResult

SIZE = 32  # the frame side these fakes take (the self-test feeds input_size frames)


def answer_for(frame: np.ndarray) -> np.ndarray:
    """The one detection row an echo context answers ``frame`` with: its checksum, exactly."""
    crc = zlib.crc32(np.ascontiguousarray(frame).data)
    return np.array([[crc & 0xFFFF, crc >> 16, 1, 1, 0.5, 0]], dtype=np.float32)


def frame(i: int) -> np.ndarray:
    """A frame of its own for request ``i``."""
    return np.random.default_rng(i).integers(0, 256, (SIZE, SIZE, 3), dtype=np.uint8)


class EchoState:
    def __init__(self) -> None:
        self.last: np.ndarray | None = None


class EchoContext(Context):
    """Keeps the frame in ``state`` (its own unless given one), sleeps ``delay_s``, answers from ``state``."""

    def __init__(self, state: EchoState | None = None, delay_s: float = 0.005) -> None:
        self.state = state or EchoState()
        self.delay_s = delay_s
        self.runs = 0
        self.lock = threading.Lock()

    def run(self, image: np.ndarray) -> ContextResult:
        self.state.last = image.copy()
        time.sleep(self.delay_s)  # releases the GIL, as RKNNLite.inference() does
        with self.lock:
            self.runs += 1
        assert self.state.last is not None
        return ContextResult(answer_for(self.state.last), 0.0, self.delay_s, 0.0)


class EchoBackend(Backend):
    """``count`` echo contexts; ``shared``: all keep their frame in one place (the bug to catch)."""

    name = "echo"

    def __init__(self, count: int, shared: bool = False, delay_s: float = 0.005) -> None:
        common = EchoState() if shared else None
        self._contexts: list[Context] = [EchoContext(common, delay_s) for _ in range(count)]

    @property
    def contexts(self) -> list[Context]:
        return self._contexts

    @property
    def input_size(self) -> int:
        return SIZE
