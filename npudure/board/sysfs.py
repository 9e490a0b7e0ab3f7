"""Small helpers for reading sysfs-like trees (real or fake ones in tests)."""

from __future__ import annotations

import re
from pathlib import Path


def numbered_children(parent: Path, prefix: str) -> list[tuple[int, Path]]:
    """Children named <prefix><N>, in numeric order (thermal_zone10 after thermal_zone9); [] if unreadable."""
    try:
        entries = list(parent.iterdir())
    except OSError:
        return []
    found = []
    for entry in entries:
        match = re.fullmatch(re.escape(prefix) + r"(\d+)", entry.name)
        if match:
            found.append((int(match.group(1)), entry))
    return sorted(found)
