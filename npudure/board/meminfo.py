"""Fields of /proc/meminfo, in bytes: the board's (or host's) memory as the kernel counts it."""

from __future__ import annotations

from pathlib import Path

MEMINFO = "/proc/meminfo"


def field_bytes(name: str, meminfo: str | Path | None = None) -> int | None:
    """``name`` (``MemAvailable``, ``MemTotal``...) in bytes, or None where the file or the line is
    missing (not Linux)."""
    try:
        text = Path(meminfo or MEMINFO).read_text()
    except OSError:
        return None
    for line in text.splitlines():
        field, _, rest = line.partition(":")
        if field == name:
            fields = rest.split()
            if fields and fields[0].isdigit():
                return int(fields[0]) * (1024 if fields[1:] == ["kB"] else 1)
    return None
