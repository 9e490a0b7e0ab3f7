"""``--memory-profile SECONDS`` (or NPUDURE_MEMORY_PROFILE=SECONDS): what grows in a long-running service.

tracemalloc traces every Python allocation; every SECONDS the service logs its traced total and the
source lines whose memory grew most since the first snapshot (taken after a warm-up interval, when
caches and pools have filled). Python objects only: glibc fragmentation and C-core buffers show in RSS,
not here, so a climbing RSS with a flat traced total points at the allocator, not at a leak.
Costs a few percent of CPU and some memory per live block: a diagnostic, not a default.
"""

from __future__ import annotations

import asyncio
import logging
import os
import tracemalloc
from collections.abc import Coroutine
from typing import Any

log = logging.getLogger(__name__)

ENV = "NPUDURE_MEMORY_PROFILE"
TOP = 10
# Allocations of the profiler itself and of the import machinery are not the service's.
IGNORED = ("<frozen importlib._bootstrap>", "<frozen importlib._bootstrap_external>", tracemalloc.__file__)


def interval_from(value: float | None, environ: dict[str, str] | None = None) -> float | None:
    """The flag, else the environment variable; None when neither is set (or it is 0)."""
    if value is None:
        raw = (os.environ if environ is None else environ).get(ENV, "").strip()
        try:
            value = float(raw) if raw else None
        except ValueError:
            raise ValueError(f"{ENV}={raw!r} is not a number of seconds") from None
    if value is not None and value < 0:
        raise ValueError(f"the memory profile interval must be >= 0 seconds, got {value}")
    return value or None


def _snapshot() -> tracemalloc.Snapshot:
    return tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, f) for f in IGNORED])


def report(base: tracemalloc.Snapshot, now: tracemalloc.Snapshot, top: int = TOP) -> list[str]:
    """Log lines: the traced total and its change, then the ``top`` growers since ``base``."""
    total = sum(s.size for s in now.statistics("filename"))
    start = sum(s.size for s in base.statistics("filename"))
    lines = [
        f"memory profile: traced {total / 2**20:.2f} MiB ({(total - start) / 2**20:+.2f} MiB since the base)"
    ]
    for stat in now.compare_to(base, "lineno")[:top]:
        if stat.size_diff <= 0:
            break
        frame = stat.traceback[0]
        lines.append(
            f"memory profile:   {stat.size_diff / 1024:+.1f} KiB ({stat.count_diff:+d} blocks, "
            f"{stat.size / 1024:.1f} KiB now) {frame.filename}:{frame.lineno}"
        )
    return lines


async def profile(interval_s: float, top: int = TOP) -> None:
    tracemalloc.start()
    log.warning(
        "memory profile on: a report every %.0fs (tracemalloc slows the service a little)", interval_s
    )
    await asyncio.sleep(interval_s)  # warm-up: pools, caches and connections fill first
    base = await asyncio.to_thread(_snapshot)
    while True:
        await asyncio.sleep(interval_s)
        now = await asyncio.to_thread(_snapshot)
        for line in report(base, now, top):
            log.warning("%s", line)


async def run_with_profile(service: Coroutine[Any, Any, None], interval_s: float | None) -> None:
    """Run ``service``; with an interval, profile beside it until it returns."""
    if not interval_s:
        await service
        return
    profiler = asyncio.create_task(profile(interval_s))
    try:
        await service
    finally:
        profiler.cancel()
        await asyncio.gather(profiler, return_exceptions=True)
        tracemalloc.stop()
