"""Inference workers: one thread per context, each context used by exactly one thread.

A request waits (board queue) for a free context, then runs decode → preprocess → inference →
postprocess on that context's own thread. The threads are pinned to the big cores when the board has
them (NPU submit latency), while the asyncio/gRPC threads may go to the little ones.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from npudure.backends.base import Context, ContextResult

log = logging.getLogger(__name__)


class PoolFull(Exception):
    """More frames waiting than the queue limit allows."""


@dataclass(slots=True)
class Worker:
    index: int
    context: Context
    executor: ThreadPoolExecutor
    busy_since: float | None = None


@dataclass(frozen=True, slots=True)
class Outcome:
    result: ContextResult
    queue_s: float
    decode_s: float


class WorkerPool:
    def __init__(
        self,
        contexts: Sequence[Context],
        queue_limit: int,
        thread_initializer: Callable[[], None] | None = None,
    ) -> None:
        self._workers = [
            Worker(i, ctx, ThreadPoolExecutor(1, f"npu{i}", initializer=thread_initializer))
            for i, ctx in enumerate(contexts)
        ]
        self._free: asyncio.Queue[Worker] = asyncio.Queue()
        for worker in self._workers:
            self._free.put_nowait(worker)
        self._queue_limit = queue_limit
        self.waiting = 0

    @property
    def size(self) -> int:
        return len(self._workers)

    @property
    def busy(self) -> int:
        return sum(1 for w in self._workers if w.busy_since is not None)

    def hung(self, timeout_s: float) -> int:
        """Workers busy on one frame for longer than ``timeout_s`` (an NPU hang)."""
        now = time.monotonic()
        return sum(1 for w in self._workers if w.busy_since is not None and now - w.busy_since > timeout_s)

    async def run(self, decode: Callable[[], np.ndarray]) -> Outcome:
        """Wait for a free context, then decode and run the frame on it."""
        if self.waiting >= self._queue_limit and self._free.empty():
            raise PoolFull(f"{self.waiting} frames already wait for an NPU core (queue_limit)")
        enqueued = time.perf_counter()
        self.waiting += 1
        try:
            worker = await self._free.get()
        finally:
            self.waiting -= 1
        queue_s = time.perf_counter() - enqueued

        def job() -> tuple[ContextResult, float]:
            worker.busy_since = time.monotonic()
            try:
                start = time.perf_counter()
                image = decode()
                decoded = time.perf_counter()
                return worker.context.run(image), decoded - start
            finally:
                worker.busy_since = None

        future = asyncio.get_running_loop().run_in_executor(worker.executor, job)
        # The context goes back to the free list only when its thread is done with it, even when the
        # caller is cancelled mid-inference: a context must never serve two frames at once.
        future.add_done_callback(lambda _f: self._free.put_nowait(worker))
        result, decode_s = await asyncio.shield(future)
        return Outcome(result, queue_s, decode_s)

    def close(self) -> None:
        for worker in self._workers:
            worker.executor.shutdown(wait=True, cancel_futures=True)
            worker.context.close()
