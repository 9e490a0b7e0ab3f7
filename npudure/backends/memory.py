"""Will this many contexts fit in the board's memory? Refused before they are made, with the figures.

Each backend knows what one context costs: onnx measures it (the RSS growth of its first session),
rknn and sim state an estimate (see their constants). Every context must fit in MemAvailable
(/proc/meminfo): the kernel's estimate of what can be allocated without swapping. RKNN contexts count
too: the NPU has no memory of its own, its buffers come from the same RAM.
"""

from __future__ import annotations

import os
from pathlib import Path

from npudure.backends.base import BackendError
from npudure.board import meminfo as meminfo_mod

MEMINFO = meminfo_mod.MEMINFO
MiB = 1 << 20

# ESTIMATE, not measured (no NPU here: librknnrt needs the rknpu driver, which neither this x86 machine
# nor arm64 under qemu has): an RKNN context holds the model's weights and its own intermediate
# tensors in NPU-mapped RAM, so 3 x the .rknn file plus 32 MiB of runtime buffers and thread stack.
RKNN_BYTES_PER_MODEL_BYTE = 3
RKNN_CONTEXT_OVERHEAD = 32 * MiB
# The sim's context is a frame buffer (640 x 640 x 3, 1.2 MB) and a worker thread: 4 MiB stated.
SIM_CONTEXT_BYTES = 4 * MiB


class ContextMemoryError(BackendError):
    """More contexts than the board's available memory holds (exit 78: a configuration error)."""


def mem_available(meminfo: str | None = None) -> int | None:
    """MemAvailable in bytes, or None where the file or the line is missing (not Linux)."""
    return meminfo_mod.field_bytes("MemAvailable", meminfo or MEMINFO)


def rss_bytes() -> int:
    """This process's resident set (0 where /proc/self/statm is missing)."""
    try:
        resident = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return 0
    return resident * os.sysconf("SC_PAGE_SIZE")


def rknn_context_bytes(model_bytes: int) -> int:
    return model_bytes * RKNN_BYTES_PER_MODEL_BYTE + RKNN_CONTEXT_OVERHEAD


def _mib(n: int) -> str:
    return f"{n / MiB:.0f} MiB"


def check(contexts: int, per_context: int, what: str, made: int = 0, meminfo: str | None = None) -> None:
    """Raise ContextMemoryError unless ``contexts - made`` more contexts of ``per_context`` bytes fit in
    MemAvailable. ``what`` says where the per-context figure comes from. No /proc/meminfo: no check."""
    available = mem_available(meminfo)
    if available is None or (contexts - made) * per_context <= available:
        return
    fits = made + available // max(1, per_context)
    already = f", {made} already made" if made else ""
    fix = f"set contexts to {fits} or fewer" if fits else "free memory or use a smaller model"
    raise ContextMemoryError(
        f"{contexts} contexts need {contexts} x {_mib(per_context)} ({what}) = "
        f"{_mib(contexts * per_context)}, but MemAvailable is {_mib(available)} ({meminfo or MEMINFO}"
        f"{already}): {fix}"
    )
