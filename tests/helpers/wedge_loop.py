"""Run an npudure service with its asyncio loop wedged: ``python wedge_loop.py SECONDS agent --config …``.

SECONDS after the loop starts, a blocking call runs on it (as a deadlocked handler would): the process
and its threads stay alive, only the loop stops. The watchdog tests use it to show that the pings come
from the loop, so systemd notices a wedged service.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Coroutine
from typing import Any

from npudure.cli import main

_run = asyncio.run


def _wedged_run(coro: Coroutine[Any, Any, Any], **kwargs: Any) -> Any:
    async def wedge_later() -> Any:
        asyncio.get_running_loop().call_later(float(sys.argv[1]), time.sleep, 3600)
        return await coro

    return _run(wedge_later(), **kwargs)


if __name__ == "__main__":
    os.environ["NPUDURE_NO_REEXEC"] = "1"  # a re-exec would run `python -m npudure`, without the wedge
    asyncio.run = _wedged_run
    sys.exit(main(sys.argv[2:]))
