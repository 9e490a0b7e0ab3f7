"""The session's own event loop: the blocking session runs each asyncio step (open a target, a load,
close) on it to the end, one at a time."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopBridge:
    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()

    def run(self, step: Coroutine[Any, Any, T]) -> T:
        return self._loop.run_until_complete(step)

    def close(self, last: Coroutine[Any, Any, None] | None = None) -> None:
        """Cancel what is still pending (an interrupted load's tasks), run ``last`` (closing the
        targets), close the loop. Failures here are not raised: closing follows an error as often."""
        with contextlib.suppress(Exception):
            pending = [t for t in asyncio.all_tasks(self._loop) if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            if last is not None:
                self._loop.run_until_complete(last)
        if last is not None:
            last.close()  # not awaited when the cancelling failed: no "never awaited" warning
        self._loop.close()
