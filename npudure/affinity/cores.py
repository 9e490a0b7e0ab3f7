"""big.LITTLE detection from ``cpu_capacity`` and thread pinning that never raises.

The split is at the largest relative gap between distinct capacities, not at "max capacity": on
RK3588 cpu4-5 report 1003 and cpu6-7 1024, and "big = max" would pick half of the big cluster.

Uniform cores (or no capacity information at all) mean *no pinning*: ``CoreSplit.big`` and
``CoreSplit.little`` are both empty, and every caller treats empty as "leave it to the kernel".
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

# Below this ratio between neighbouring capacities the cores are treated as one cluster.
DEFAULT_MIN_GAP = 1.2

_CPU_DIR = re.compile(r"^cpu(\d+)$")


@dataclass(frozen=True)
class CoreSplit:
    """Where latency-sensitive work (big) and I/O or IRQ work (little) should run.

    ``uniform`` is True when there is nothing to split; then ``big`` and ``little`` are empty and
    nothing is pinned. ``capacities`` keeps what was read, as sorted (cpu, capacity) pairs.
    """

    big: tuple[int, ...]
    little: tuple[int, ...]
    uniform: bool
    reason: str
    capacities: tuple[tuple[int, int], ...] = ()

    @property
    def cpus(self) -> tuple[int, ...]:
        return tuple(cpu for cpu, _ in self.capacities)


def _cpu_root(sysfs_root: str | os.PathLike[str]) -> Path:
    return Path(sysfs_root) / "devices" / "system" / "cpu"


def read_capacities(sysfs_root: str | os.PathLike[str] = "/sys") -> dict[int, int]:
    """``{cpu: capacity}`` from ``cpuN/cpu_capacity``; CPUs without a readable positive value are left out."""
    root = _cpu_root(sysfs_root)
    try:
        entries = list(root.iterdir())
    except OSError:
        return {}
    capacities: dict[int, int] = {}
    for entry in entries:
        match = _CPU_DIR.match(entry.name)
        if not match:
            continue
        try:
            value = int((entry / "cpu_capacity").read_text().strip())
        except (OSError, ValueError):
            continue
        if value > 0:  # a zero would make every ratio infinite; treat it as unreadable
            capacities[int(match.group(1))] = value
    return dict(sorted(capacities.items()))


def split_big_little(capacities: dict[int, int], min_gap: float = DEFAULT_MIN_GAP) -> CoreSplit:
    """Split CPUs at the largest relative gap between distinct capacities, if that gap is >= ``min_gap``.

    Ties between equally large gaps go to the lowest one, so the big set is the larger one.
    """
    pairs = tuple(sorted(capacities.items()))
    if not pairs:
        return CoreSplit((), (), True, "no cpu_capacity in sysfs: not splitting, nothing is pinned", pairs)
    values = sorted(set(capacities.values()))
    if len(values) == 1:
        what = "one CPU" if len(pairs) == 1 else f"all {len(pairs)} CPUs"
        return CoreSplit(
            (), (), True, f"{what} report capacity {values[0]}: uniform, nothing is pinned", pairs
        )
    best = max(range(len(values) - 1), key=lambda i: (values[i + 1] / values[i], -i))
    lo, hi = values[best], values[best + 1]
    gap = hi / lo
    if gap < min_gap:
        return CoreSplit(
            (),
            (),
            True,
            f"capacities {values} differ by at most {gap:.2f}x (< {min_gap}): uniform, nothing is pinned",
            pairs,
        )
    big = tuple(cpu for cpu, cap in pairs if cap >= hi)
    little = tuple(cpu for cpu, cap in pairs if cap <= lo)
    reason = (
        f"capacities {values}: largest gap {lo} -> {hi} ({gap:.2f}x >= {min_gap}); "
        f"big = cpus {format_cpu_list(big)}, little = cpus {format_cpu_list(little)}"
    )
    return CoreSplit(big, little, False, reason, pairs)


def detect(sysfs_root: str | os.PathLike[str] = "/sys", min_gap: float = DEFAULT_MIN_GAP) -> CoreSplit:
    return split_big_little(read_capacities(sysfs_root), min_gap)


# ---------------------------------------------------------------- where this process can run


def _online_cpus() -> set[int]:
    # Always the real sysfs: emulated boards point sysfs_root at a fake tree describing a board that
    # this host is not.
    try:
        return set(parse_cpu_list(Path("/sys/devices/system/cpu/online").read_text()))
    except (OSError, ValueError):
        return set()


def runnable_cpus() -> set[int]:
    """CPUs a thread of this process could be moved to; empty when the platform cannot tell.

    The calling thread's own mask is not enough: under systemd ``CPUAffinity=4-7`` the agent starts
    on the big cores and must still be able to move its I/O threads to the little ones, so the
    online CPUs count too. (A cpuset cgroup can still refuse; pin_current_thread handles that.)
    """
    if not hasattr(os, "sched_getaffinity"):
        return set()
    return set(os.sched_getaffinity(0)) | _online_cpus()


def usable(cpus: Iterable[int]) -> tuple[int, ...]:
    """``cpus`` that exist here. Logs why when some or all are dropped; never raises."""
    wanted = sorted(set(cpus))
    if not wanted:
        return ()
    here = runnable_cpus()
    if not here:
        log.info(
            "cannot query CPU affinity on this platform; not pinning to cpus %s", format_cpu_list(wanted)
        )
        return ()
    kept = tuple(cpu for cpu in wanted if cpu in here)
    dropped = [cpu for cpu in wanted if cpu not in here]
    if dropped:
        log.info(
            "cpus %s do not exist on this machine (it has %s)%s",
            format_cpu_list(dropped),
            format_cpu_list(here),
            "; not pinning" if not kept else f"; using {format_cpu_list(kept)}",
        )
    return kept


def pin_current_thread(cpus: Iterable[int]) -> bool:
    """Move the calling thread (only it, on Linux) to the usable part of ``cpus``. False = nothing done."""
    target = usable(cpus)
    if not target or not hasattr(os, "sched_setaffinity"):
        return False
    try:
        os.sched_setaffinity(0, target)
    except OSError as exc:  # e.g. EINVAL when a cpuset cgroup excludes every target CPU
        log.warning("could not pin this thread to cpus %s: %s", format_cpu_list(target), exc.strerror)
        return False
    return True


# ---------------------------------------------------------------- formats


def format_cpu_list(cpus: Iterable[int]) -> str:
    """``[0, 2, 3, 4, 7] -> "0,2-4,7"`` (the kernel's and systemd's list format); empty -> ``""``."""
    ordered = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """``"0,2-4,7" -> (0, 2, 3, 4, 7)``; also accepts spaces as separators (``related_cpus``)."""
    cpus: set[int] = set()
    for part in re.split(r"[,\s]+", text.strip()):
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(f"{text.strip()!r} is not a CPU list like 0-3,6")
        first, last = int(lo), int(hi) if sep else int(lo)
        if last < first:
            raise ValueError(f"{part!r} in {text.strip()!r} is a backwards range")
        cpus.update(range(first, last + 1))
    return tuple(sorted(cpus))


def cpu_mask_hex(cpus: Iterable[int]) -> str:
    """``{0, 1, 2, 3} -> "f"``, as in ``/proc/irq/N/smp_affinity``: 32-bit groups joined by commas."""
    mask = 0
    for cpu in cpus:
        if cpu < 0:
            raise ValueError(f"cpu {cpu} is negative")
        mask |= 1 << cpu
    groups: list[str] = []
    while True:
        groups.append(f"{mask & 0xFFFFFFFF:08x}")
        mask >>= 32
        if not mask:
            break
    groups.reverse()
    groups[0] = groups[0].lstrip("0") or "0"
    return ",".join(groups)


def parse_cpu_mask_hex(text: str) -> tuple[int, ...]:
    """``"ff,00000000" -> (32, ..., 39)``; the reverse of cpu_mask_hex, tolerant of zero padding."""
    groups = text.strip().split(",")
    if not all(re.fullmatch(r"[0-9a-fA-F]{1,8}", group) for group in groups):
        raise ValueError(f"{text.strip()!r} is not a hex CPU mask like f or ff,ffffffff")
    mask = 0
    for group in groups:  # each comma group is 32 CPUs, most significant first
        mask = mask << 32 | int(group, 16)
    return tuple(cpu for cpu in range(mask.bit_length()) if mask >> cpu & 1)
