"""Threads fed by one ``queue.SimpleQueue``: the agent's per-frame hand-off off the event loop.

One per NPU context (the pool: one thread, so one context never serves two frames) and one for the
JPEG decoders (a few threads sharing the queue). ``loop.run_in_executor`` on a ``ThreadPoolExecutor``
costs a concurrent future, its lock and condition, an asyncio future chained to it and, for the
release-on-return rule, an ``asyncio.shield`` on top. Here a call is one queue put, and its end one
``call_soon_threadsafe`` that settles an asyncio future and runs the caller's ``on_return`` — on the
event loop, after the call has returned, whether or not anyone still awaits the result.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

_Job = tuple[
    Callable[[], Any],
    asyncio.AbstractEventLoop | None,
    "asyncio.Future[Any] | None",
    Callable[[], None] | None,
]


class JobThreads:
    """Runs callables on ``threads`` daemon threads taking them in order from one queue (one thread:
    one at a time, in order). Daemons: started with the agent, they must not keep a process alive
    that fails before serving (a port in use) or whose NPU call hangs; the owner stops and joins
    them on a normal stop. Named ``name``, or ``name0``, ``name1``… when there are several."""

    def __init__(self, name: str, initializer: Callable[[], object] | None = None, threads: int = 1) -> None:
        if threads < 1:
            raise ValueError(f"{name}: at least one thread, not {threads}")
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._initializer = initializer
        names = [name] if threads == 1 else [f"{name}{i}" for i in range(threads)]
        self._threads = [threading.Thread(target=self._serve, name=n, daemon=True) for n in names]
        for thread in self._threads:
            thread.start()

    def submit(self, fn: Callable[[], Any], on_return: Callable[[], None]) -> asyncio.Future[Any]:
        """``fn`` on one of the threads; the future gets its result. ``on_return`` runs on the event loop once
        ``fn`` has returned, even when the future was cancelled meanwhile (the caller went away)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._queue.put((fn, loop, future, on_return))
        return future

    def call(self, fn: Callable[[], object]) -> None:
        """``fn`` on one of the threads, nobody waiting for it (it handles its own errors)."""
        self._queue.put((fn, None, None, None))

    def stop(self, wait: bool) -> None:
        """End the threads after what is already queued; ``wait``: until they have ended."""
        for _ in self._threads:  # each thread takes one stop mark and ends
            self._queue.put(None)
        if wait:
            for thread in self._threads:
                thread.join()

    def _serve(self) -> None:
        name = threading.current_thread().name
        if self._initializer is not None:
            try:
                self._initializer()
            except Exception:  # e.g. pinning refused: serve unpinned rather than never answer
                log.exception("%s: its thread initializer failed", name)
        while (job := self._queue.get()) is not None:
            fn, loop, future, on_return = job
            # A job whose caller has gone (its deadline passed, its client hung up: the future was
            # cancelled while it queued) is not run: work nobody waits for would delay those who do.
            # The read races the loop harmlessly: at worst a job cancelled this instant still runs.
            if future is not None and future.cancelled():
                result, error = None, None
            else:
                try:
                    result, error = fn(), None
                except BaseException as exc:  # the caller's to handle: it is raised where it awaits
                    result, error = None, exc
            if loop is None or future is None:
                if error is not None:
                    log.error("a call on %s failed", name, exc_info=error)
                continue
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is left to tell
                loop.call_soon_threadsafe(_settle, future, result, error, on_return)


def _settle(
    future: asyncio.Future[Any],
    result: Any,
    error: BaseException | None,
    on_return: Callable[[], None] | None,
) -> None:
    if not future.done():  # cancelled when its caller went away
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(error)
    if on_return is not None:
        on_return()
