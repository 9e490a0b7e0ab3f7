"""NPU (and optionally GPU) hardware IRQs steered to the little cores.

Submit threads want the big cores; IRQ handlers want the little ones, so that an interrupt never
preempts a big core mid-inference. The plan is computed from sysfs (the core split) and procfs
(``interrupts`` and ``irq/N/smp_affinity``), both under configurable roots so that emulated boards
and tests can hand in their own trees.
"""

from __future__ import annotations

import errno
import os
import re
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from npudure.affinity import cores

# rknpu registers its IRQs under the device name: 27700000.npu (RK3576), fdab0000.npu (RK3588).
NPU_PATTERNS: tuple[str, ...] = (r"\.npu\b",)
# Vivante (galcore) and Mali (mali / kbase's <addr>.gpu) GPUs.
GPU_PATTERNS: tuple[str, ...] = (r"galcore", r"(?i)\bmali", r"\.gpu\b")


@dataclass(frozen=True)
class IrqLine:
    """One numbered row of /proc/interrupts."""

    number: int
    counts: tuple[int, ...]
    # Everything between the counts and the device names: controller, hwirq, trigger.
    chip: str
    devices: tuple[str, ...]

    @property
    def name(self) -> str:
        return ", ".join(self.devices)


@dataclass(frozen=True)
class DeviceIrq:
    irq: int
    device: str


def parse_interrupts(text: str) -> list[IrqLine]:
    """Numbered rows of /proc/interrupts; NMI/LOC/IPI and other named rows are skipped."""
    lines = text.splitlines()
    if not lines:
        return []
    ncpu = sum(1 for token in lines[0].split() if re.fullmatch(r"CPU\d+", token))
    rows: list[IrqLine] = []
    for line in lines[1:]:
        head, sep, rest = line.partition(":")
        if not sep or not head.strip().isdigit():
            continue
        tokens = rest.split()
        counts: list[int] = []
        while tokens and len(counts) < ncpu and tokens[0].isdigit():
            counts.append(int(tokens.pop(0)))
        # Device names come last; several handlers sharing a line are joined by ", ".
        names: list[str] = []
        while tokens:
            if names and not tokens[-1].endswith(","):
                break
            names.insert(0, tokens.pop().rstrip(","))
        rows.append(IrqLine(int(head), tuple(counts), " ".join(tokens), tuple(n for n in names if n)))
    return rows


def find_device_irqs(lines: Iterable[IrqLine], patterns: Iterable[str] = NPU_PATTERNS) -> list[DeviceIrq]:
    """IRQs with at least one device name matching any pattern (regex search), one entry per IRQ."""
    compiled = [re.compile(p) for p in patterns]
    found: dict[int, DeviceIrq] = {}
    for line in lines:
        hits = [name for name in line.devices if any(p.search(name) for p in compiled)]
        if hits and line.number not in found:
            found[line.number] = DeviceIrq(line.number, ", ".join(hits))
    return [found[n] for n in sorted(found)]


def wait_for_npu_irqs(
    proc_root: str | os.PathLike[str] = "/proc", timeout_s: float = 30.0, interval_s: float = 0.5
) -> list[DeviceIrq]:
    """The NPU lines of <proc_root>/interrupts, waiting up to ``timeout_s`` for the driver to probe.

    rknpu may probe after systemd-modules-load (a deferred probe, a late power domain): a oneshot that
    looks once would find nothing and steer nothing. Empty when none appeared in time.
    """
    deadline = time.monotonic() + timeout_s
    path = Path(proc_root) / "interrupts"
    while True:
        try:
            found = find_device_irqs(parse_interrupts(path.read_text()))
        except OSError:
            found = []
        if found or time.monotonic() >= deadline:
            return found
        time.sleep(interval_s)


# ---------------------------------------------------------------- plan


@dataclass(frozen=True)
class IrqAssignment:
    irq: int
    device: str
    target_mask: str
    target_cpus: str
    # As read from <proc_root>/irq/N/smp_affinity when planning; None when unreadable.
    current_mask: str | None

    @property
    def current_cpus(self) -> str | None:
        return _mask_to_list(self.current_mask)

    @property
    def needs_change(self) -> bool:
        return self.current_cpus != self.target_cpus


@dataclass(frozen=True)
class Plan:
    split: cores.CoreSplit
    # The big cores as a list ("4-7"), for the agent's NPU submit threads; "" when uniform.
    agent_cpus: str
    # The little cores ("0-3"), for I/O threads and IRQ handlers; "" when uniform.
    io_cpus: str
    # The value for systemd CPUAffinity=: the big cores that exist on this machine; "" = don't pin.
    cpu_affinity: str
    irqs: tuple[IrqAssignment, ...]
    notes: tuple[str, ...] = field(default=())

    @property
    def uniform(self) -> bool:
        return self.split.uniform

    def to_dict(self) -> dict[str, object]:
        """The stable JSON shape of ``npudure affinity plan --json`` (Ansible reads it)."""
        return {
            "uniform": self.split.uniform,
            "reason": self.split.reason,
            "capacities": {str(cpu): cap for cpu, cap in self.split.capacities},
            "big_cpus": self.agent_cpus,
            "little_cpus": self.io_cpus,
            "cpu_affinity": self.cpu_affinity,
            "irqs": [
                {
                    "irq": a.irq,
                    "device": a.device,
                    "target_mask": a.target_mask,
                    "target_cpus": a.target_cpus,
                    "current_mask": a.current_mask,
                    "current_cpus": a.current_cpus,
                    "needs_change": a.needs_change,
                }
                for a in self.irqs
            ],
            "notes": list(self.notes),
        }


def _mask_to_list(mask: str | None) -> str | None:
    if mask is None:
        return None
    try:
        return cores.format_cpu_list(cores.parse_cpu_mask_hex(mask))
    except ValueError:
        return None


def _affinity_path(proc_root: str | os.PathLike[str], irq: int) -> Path:
    return Path(proc_root) / "irq" / str(irq) / "smp_affinity"


def _read_mask(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def make_plan(
    sysfs_root: str | os.PathLike[str] = "/sys",
    proc_root: str | os.PathLike[str] = "/proc",
    include_gpu: bool = False,
    min_gap: float = cores.DEFAULT_MIN_GAP,
) -> Plan:
    split = cores.detect(sysfs_root, min_gap)
    if split.uniform:
        return Plan(
            split, "", "", "", (), ("uniform cores: the agent is not pinned and IRQs stay where they are",)
        )

    notes: list[str] = []
    big, little = cores.format_cpu_list(split.big), cores.format_cpu_list(split.little)
    here = cores.usable(split.big)
    cpu_affinity = cores.format_cpu_list(here)
    if not here:
        notes.append(
            f"big cpus {big} do not exist on this machine (an emulated board?): CPUAffinity= stays empty"
        )
    elif cpu_affinity != big:
        notes.append(f"only cpus {cpu_affinity} of the big cpus {big} exist here: CPUAffinity={cpu_affinity}")

    interrupts = Path(proc_root) / "interrupts"
    try:
        lines = parse_interrupts(interrupts.read_text())
    except OSError as exc:
        notes.append(f"cannot read {interrupts} ({exc.strerror}): no IRQs to steer")
        lines = []
    patterns = NPU_PATTERNS + (GPU_PATTERNS if include_gpu else ())
    found = find_device_irqs(lines, patterns)
    if lines and not found:
        what = "NPU or GPU" if include_gpu else "NPU"
        notes.append(f"no {what} interrupt in {interrupts} (is the rknpu driver loaded?): nothing to steer")

    mask = cores.cpu_mask_hex(split.little)
    irqs = tuple(
        IrqAssignment(d.irq, d.device, mask, little, _read_mask(_affinity_path(proc_root, d.irq)))
        for d in found
    )
    return Plan(split, big, little, cpu_affinity, irqs, tuple(notes))


# ---------------------------------------------------------------- apply


Status = Literal["changed", "unchanged", "would change", "failed"]


@dataclass(frozen=True)
class IrqChange:
    irq: int
    device: str
    path: str
    before: str | None
    after: str | None
    status: Status
    error: str | None = None

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def _write_error(path: Path, exc: OSError, assignment: IrqAssignment) -> str:
    code = errno.errorcode.get(exc.errno or 0, "?")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return f"cannot write {path}: {exc.strerror} ({code}); run as root (sudo npudure affinity apply)"
    if exc.errno == errno.EROFS:
        return (
            f"cannot write {path}: read-only file system ({code}); run as root on the board itself "
            "(inside a container /proc/irq is read-only unless a copy is bind-mounted over it)"
        )
    if exc.errno in (errno.EINVAL, errno.EIO):
        return (
            f"the kernel refused mask {assignment.target_mask} in {path}: {exc.strerror} ({code}); "
            f"IRQ {assignment.irq} may not be movable, or cpus {assignment.target_cpus} are offline"
        )
    return f"cannot write {path}: {exc.strerror} ({code})"


def _write_mask(path: Path, mask: str) -> None:
    # One write() call: procfs parses the whole mask from a single write.
    with path.open("w") as handle:
        handle.write(mask + "\n")


def _apply_one(assignment: IrqAssignment, proc_root: str | os.PathLike[str], dry_run: bool) -> IrqChange:
    path = _affinity_path(proc_root, assignment.irq)

    def change(status: Status, before: str | None, after: str | None, error: str | None = None) -> IrqChange:
        return IrqChange(assignment.irq, assignment.device, str(path), before, after, status, error)

    try:
        before = path.read_text().strip()
    except OSError as exc:
        hint = "; run `npudure affinity plan` again" if exc.errno == errno.ENOENT else ""
        return change("failed", None, None, f"cannot read {path}: {exc.strerror}{hint}")
    if _mask_to_list(before) == assignment.target_cpus:
        return change("unchanged", before, before)
    if dry_run:
        return change("would change", before, assignment.target_mask)
    try:
        _write_mask(path, assignment.target_mask)
    except OSError as exc:
        return change("failed", before, before, _write_error(path, exc, assignment))
    after = _read_mask(path)
    if _mask_to_list(after) != assignment.target_cpus:
        return change(
            "failed",
            before,
            after,
            f"wrote {assignment.target_mask} to {path} but read back {after!r}: the kernel did not take the "
            f"mask (IRQ {assignment.irq} may not be movable)",
        )
    return change("changed", before, after)


def apply_plan(
    plan: Plan, proc_root: str | os.PathLike[str] = "/proc", dry_run: bool = False
) -> list[IrqChange]:
    """Write each planned IRQ's little-core mask, read it back; idempotent. Empty for uniform cores."""
    return [_apply_one(assignment, proc_root, dry_run) for assignment in plan.irqs]
