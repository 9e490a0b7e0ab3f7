"""Inference workers: one thread per context, each context used by exactly one thread.

A decoded frame (npudure.agent.decode_pool) waits (board queue) for a free context, then runs
preprocess → inference → postprocess on that context's own thread. The threads are pinned to the big
cores when the board has them (NPU submit latency), while the asyncio/gRPC threads may go to the
little ones.

One context, one frame at a time is an enforced invariant, not a convention: a context handed out is
marked in use (under a lock) until its thread returns, and handing it out again meanwhile raises
:class:`ContextShared` instead of running. The reference's shared context returned another thread's
answer 200 of 200 times with no API error: a wrong answer, never a crash, so nothing else would show it.

A context stuck on one frame past the hang timeout is *replaced* (:meth:`WorkerPool.recover_hung`):
a new context on a new thread takes its slot, and the old one is released only when its thread
returns, so no context ever serves two frames and a hung call never blocks the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from npudure.agent.job_threads import JobThreads
from npudure.backends.base import Context, ContextResult

log = logging.getLogger(__name__)


class PoolFull(Exception):
    """More frames waiting than the queue limit allows."""


class ContextShared(RuntimeError):
    """Internal error: the pool was about to hand a context already in use to a second frame."""


@dataclass(slots=True)
class Worker:
    index: int
    context: Context
    thread: JobThreads
    busy_since: float | None = None
    # Replaced after a hang: release the context when its thread returns, never hand it out again.
    retired: bool = False


@dataclass(frozen=True, slots=True)
class Outcome:
    result: ContextResult
    queue_s: float
    # The worker thread's CPU ns by stage (cpu_account.STAGES): the backend's own split, the rest of
    # its run() as "inference".
    cpu_ns: dict[str, int] = field(default_factory=dict)


class WorkerPool:
    def __init__(
        self,
        contexts: Sequence[Context],
        queue_limit: int,
        thread_initializer: Callable[[], object] | None = None,  # its return value is ignored
    ) -> None:
        if len({id(ctx) for ctx in contexts}) != len(contexts):
            raise ValueError("the same context appears twice in the pool: each must be its own")
        # id() of each context handed out whose thread has not returned, with the context (kept so its id
        # cannot be reused meanwhile).
        self._in_use: dict[int, Context] = {}
        self._in_use_lock = threading.Lock()
        self._workers = [
            Worker(i, ctx, JobThreads(f"npu{i}", thread_initializer)) for i, ctx in enumerate(contexts)
        ]
        self._free: asyncio.Queue[Worker] = asyncio.Queue()
        for worker in self._workers:
            self._free.put_nowait(worker)
        self._queue_limit = queue_limit
        self._initializer = thread_initializer
        # Hung workers replaced but whose thread has not returned yet (their context is still held).
        self._retired: list[Worker] = []
        self.recoveries = 0
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

    @property
    def abandoned(self) -> int:
        """Replaced contexts whose hung call has not returned (each still holds a thread)."""
        return len(self._retired)

    def recover_hung(self, timeout_s: float, new_context: Callable[[int], Context]) -> int:
        """Give each slot hung past ``timeout_s`` a new context; returns how many were replaced.

        At most ``size`` hung calls are abandoned at once: beyond that the slot stays hung (and the
        agent NOT_SERVING) rather than leak threads without bound. ``new_context`` may raise; the
        slot then stays hung and the next call tries again.
        """
        now = time.monotonic()
        replaced = 0
        for i, old in enumerate(self._workers):
            if old.busy_since is None or now - old.busy_since <= timeout_s:
                continue
            if len(self._retired) >= self.size:
                log.error(
                    "NPU slot %d hung, but %d hung calls are still held: not replacing it", i, self.size
                )
                continue
            context = new_context(old.index)
            fresh = Worker(old.index, context, JobThreads(f"npu{old.index}", self._initializer))
            old.retired = True
            self._retired.append(old)
            self._workers[i] = fresh
            self._free.put_nowait(fresh)
            self.recoveries += 1
            replaced += 1
            log.error(
                "NPU context %d hung for more than %.1fs: replaced by a new one (the old one is released "
                "when its call returns)",
                old.index,
                timeout_s,
            )
        return replaced

    def _claim(self, worker: Worker) -> None:
        with self._in_use_lock:
            if id(worker.context) in self._in_use:
                raise ContextShared(
                    f"NPU context {worker.index} was about to serve a second frame while busy with one: "
                    "refused (a bug in the agent's worker pool)"
                )
            self._in_use[id(worker.context)] = worker.context

    def _release(self, worker: Worker) -> None:
        with self._in_use_lock:
            self._in_use.pop(id(worker.context), None)

    def _done(self, worker: Worker) -> None:
        self._release(worker)
        if not worker.retired:
            self._free.put_nowait(worker)
            return
        # The hung call came back: release its context on its own thread, then let the thread go.
        self._retired.remove(worker)
        context = worker.context
        worker.thread.call(lambda: _close_quietly(context))
        worker.thread.stop(wait=False)
        log.warning("NPU context %d: the hung call returned; its old context is released", worker.index)

    async def run(self, image: np.ndarray) -> Outcome:
        """Wait for a free context, then run the decoded ``image`` (the model's input) on it."""
        if self.waiting >= self._queue_limit and self._free.empty():
            raise PoolFull(f"{self.waiting} frames already wait for an NPU core (queue_limit)")
        enqueued = time.perf_counter()
        self.waiting += 1
        try:
            worker = await self._free.get()
        finally:
            self.waiting -= 1
        queue_s = time.perf_counter() - enqueued
        try:
            self._claim(worker)
        except ContextShared:
            # This hand-out is the duplicate: the frame that holds the context returns it when done.
            log.error("NPU context %d handed out twice: the second hand-out refused", worker.index)
            raise

        def job() -> tuple[ContextResult, dict[str, int]]:
            worker.busy_since = time.monotonic()
            try:
                c0 = time.thread_time_ns()
                result = worker.context.run(image)
                return result, _worker_cpu(result, time.thread_time_ns() - c0)
            finally:
                worker.busy_since = None

        # The context goes back to the free list only when its thread is done with it, even when the
        # caller is cancelled mid-inference: a context must never serve two frames at once.
        result, cpu_ns = await worker.thread.submit(job, lambda: self._done(worker))
        return Outcome(result, queue_s, cpu_ns)

    def close(self) -> None:
        for worker in self._workers:
            worker.thread.stop(wait=True)
            worker.context.close()
        for worker in self._retired:  # still hung: do not wait for them
            worker.thread.stop(wait=False)


def _worker_cpu(result: ContextResult, run_ns: int) -> dict[str, int]:
    """The backend's measured stages, and what else run() cost the thread as "inference"."""
    cpu = dict(result.cpu_ns or {})
    cpu["inference"] = max(0, run_ns - sum(cpu.values()))
    return cpu


def _close_quietly(context: Context) -> None:
    try:
        context.close()
    except Exception:
        log.exception("releasing a replaced NPU context failed")
