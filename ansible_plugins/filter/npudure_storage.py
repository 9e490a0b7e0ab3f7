"""Where the monitoring host keeps its metrics and how much of that disk Prometheus may use."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

MIB = 1048576


def storage_mount(mounts: Iterable[Mapping[str, Any]], path: str) -> Mapping[str, Any]:
    """The mount of MOUNTS (ansible_facts['mounts']) that holds PATH: the longest mount point that
    contains it ({} when none does). The first of equally long ones wins."""
    found: Mapping[str, Any] = {}
    length = -1
    for mount in mounts:
        try:
            point = mount["mount"]
        except (KeyError, TypeError):
            raise AnsibleFilterError(
                f"npudure_storage_mount: {mount!r} is not a mount fact (no 'mount' key)"
            ) from None
        if (path + "/").startswith(point.rstrip("/") + "/") and len(point) > length:
            found, length = mount, len(point)
    return found


def _number(value: Any, what: str) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise AnsibleFilterError(f"npudure_retention_size: {what} {value!r} is not a number") from None


def retention_size(mount: Mapping[str, Any], explicit: str, fraction: Any, min_mb: Any) -> str:
    """Prometheus' retention size: EXPLICIT when set, else FRACTION of MOUNT's free space in MB
    (never below MIN_MB), else MIN_MB when the mount's free space is unknown."""
    if len(explicit) > 0:
        return explicit
    floor = int(_number(min_mb, "npudure_monitoring_retention_min_mb"))
    if "size_available" not in mount:
        return f"{min_mb}MB"
    free = mount["size_available"]
    free = free if isinstance(free, int) else int(_number(free, "size_available"))
    return (
        f"{max(int(free * _number(fraction, 'npudure_monitoring_retention_disk_fraction') / MIB), floor)}MB"
    )


class FilterModule:
    """npudure storage filters."""

    def filters(self) -> dict[str, Any]:
        return {"npudure_storage_mount": storage_mount, "npudure_retention_size": retention_size}
