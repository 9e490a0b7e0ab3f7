"""One thread per NPU context, fed by a ``queue.SimpleQueue``: the pool's per-frame hand-off.

``loop.run_in_executor`` on a one-thread ``ThreadPoolExecutor`` costs a concurrent future, its lock
and condition, an asyncio future chained to it and, for the pool's release-on-return rule, an
``asyncio.shield`` on top. Here a call is one queue put, and its end one ``call_soon_threadsafe``
that settles an asyncio future and runs the caller's ``on_return`` — on the event loop, after the
call has returned, whether or not anyone still awaits the result.
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


class NpuThread:
    """Runs callables one at a time, in order, on its own daemon thread: started with the pool, it
    must not keep a process alive that fails before serving (a port in use) or whose NPU call hangs;
    ``WorkerPool.close`` stops and joins it on a normal stop."""

    def __init__(self, name: str, initializer: Callable[[], object] | None = None) -> None:
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._initializer = initializer
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[[], Any], on_return: Callable[[], None]) -> asyncio.Future[Any]:
        """``fn`` on this thread; the future gets its result. ``on_return`` runs on the event loop once
        ``fn`` has returned, even when the future was cancelled meanwhile (the caller went away)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._queue.put((fn, loop, future, on_return))
        return future

    def call(self, fn: Callable[[], object]) -> None:
        """``fn`` on this thread, nobody waiting for it (it handles its own errors)."""
        self._queue.put((fn, None, None, None))

    def stop(self, wait: bool) -> None:
        """End the thread after what is already queued; ``wait``: until it has ended."""
        self._queue.put(None)
        if wait:
            self._thread.join()

    def _serve(self) -> None:
        if self._initializer is not None:
            try:
                self._initializer()
            except Exception:  # e.g. pinning refused: serve unpinned rather than never answer
                log.exception("%s: its thread initializer failed", self._thread.name)
        while (job := self._queue.get()) is not None:
            fn, loop, future, on_return = job
            try:
                result, error = fn(), None
            except BaseException as exc:  # the caller's to handle: it is raised where it awaits
                result, error = None, exc
            if loop is None or future is None:
                if error is not None:
                    log.error("a call on %s failed", self._thread.name, exc_info=error)
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
