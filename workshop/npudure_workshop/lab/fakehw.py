"""Fake board hardware inside each emulated board, so the affinity roles do real work a test can read back.

The layout is big.LITTLE with 8 CPUs, numbered so the BIG cores are cpu0-3 (capacity 1024) and the
little ones cpu4-7 (capacity 415). That is reversed from the RK3576 (little cores 0-3): the lab's host
has only CPUs 0-1, and systemd fails a unit whose ``CPUAffinity=`` names only CPUs that do not exist
(EINVAL), so the big cores, where the NPU submit threads go, must include real CPUs. The planning
rules split by capacity, never by CPU number, so the reversal does not change what they decide.

Paths inside a board (all under LAB_HW_ROOT, written into the board's own overlay layer):
- ``sys/devices/system/cpu/cpuN/cpu_capacity`` (a sysfs root for ``--sysfs-root``)
- ``proc/interrupts`` and ``proc/irq/…`` (bind-mounted over ``/proc/interrupts`` and ``/proc/irq``)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

LAB_HW_ROOT = "/var/lib/npudure-lab"
SYSFS_ROOT = f"{LAB_HW_ROOT}/sys"
PROC_ROOT = f"{LAB_HW_ROOT}/proc"

BIG_CAPACITY = 1024
LITTLE_CAPACITY = 415
NPU_IRQ = 87
NPU_DEVICE = "27700000.npu"  # the RK3576's NPU as /proc/interrupts names it


@dataclass(frozen=True)
class Irq:
    number: int
    counts: tuple[int, ...]
    chip: str
    hwirq: int
    trigger: str
    name: str


@dataclass(frozen=True)
class CpuLayout:
    big: tuple[int, ...] = (0, 1, 2, 3)
    little: tuple[int, ...] = (4, 5, 6, 7)

    @property
    def ncpus(self) -> int:
        return len(self.big) + len(self.little)

    def capacity(self, cpu: int) -> int:
        return BIG_CAPACITY if cpu in self.big else LITTLE_CAPACITY


DEFAULT_LAYOUT = CpuLayout()


def default_irqs(ncpus: int = 8) -> list[Irq]:
    """A few ordinary device IRQs plus the NPU's, as an RK3576 board shows them (counts are fixed)."""

    def on_cpu0(n: int) -> tuple[int, ...]:
        return (n,) + (0,) * (ncpus - 1)

    return [
        Irq(11, tuple(52310 - 4000 * i for i in range(ncpus)), "GICv3", 30, "Level", "arch_timer"),
        Irq(45, on_cpu0(18233), "GICv3", 69, "Level", "2a220000.ethernet"),
        Irq(61, on_cpu0(887), "GICv3", 248, "Level", "mmc0"),
        Irq(NPU_IRQ, on_cpu0(4096), "GICv3", 142, "Level", NPU_DEVICE),
    ]


def _mask_hex(cpus: range | tuple[int, ...]) -> str:
    return format(sum(1 << c for c in cpus), "x")


def render_interrupts(irqs: list[Irq], ncpus: int = 8) -> str:
    """A /proc/interrupts table in the kernel's column layout (header, IRQ lines, IPIs, Err)."""
    width = 4
    lines = [" " * (width + 1) + "".join(f"{'CPU' + str(c):>11}" for c in range(ncpus))]
    for irq in irqs:
        counts = "".join(f"{n:>11}" for n in irq.counts)
        lines.append(
            f"{str(irq.number) + ':':>{width + 1}}{counts} {irq.chip:>8} {irq.hwirq:>3} "
            f"{irq.trigger:<8}  {irq.name}"
        )
    for i, what in enumerate(("Rescheduling interrupts", "Function call interrupts")):
        counts = "".join(f"{1000 + 100 * c:>11}" for c in range(ncpus))
        lines.append(f"{'IPI' + str(i) + ':':>{width + 1}}{counts}       {what}")
    lines.append(f"{'Err:':>{width + 1}}{0:>11}")
    return "\n".join(lines) + "\n"


def sysfs_files(layout: CpuLayout = DEFAULT_LAYOUT) -> dict[str, str]:
    """Files of the fake sysfs tree, relative to the sysfs root."""
    cpus = f"0-{layout.ncpus - 1}"
    files = {f"devices/system/cpu/{n}": cpus + "\n" for n in ("online", "possible", "present")}
    for cpu in range(layout.ncpus):
        base = f"devices/system/cpu/cpu{cpu}"
        files[f"{base}/cpu_capacity"] = f"{layout.capacity(cpu)}\n"
        files[f"{base}/online"] = "1\n"
        files[f"{base}/topology/cluster_id"] = "0\n" if cpu in layout.big else "1\n"
    return files


def proc_files(irqs: list[Irq] | None = None, ncpus: int = 8) -> dict[str, str]:
    """Files of the fake proc tree (``interrupts`` and a writable ``irq/``), relative to the proc root.

    Directories named after a handler (``irq/87/27700000.npu/``) are what the kernel shows too; they
    are listed with a trailing slash.
    """
    irqs = irqs if irqs is not None else default_irqs(ncpus)
    all_cpus = range(ncpus)
    files = {
        "interrupts": render_interrupts(irqs, ncpus),
        "irq/default_smp_affinity": _mask_hex(all_cpus) + "\n",
    }
    for irq in irqs:
        base = f"irq/{irq.number}"
        files[f"{base}/smp_affinity"] = _mask_hex(all_cpus) + "\n"
        files[f"{base}/smp_affinity_list"] = f"0-{ncpus - 1}\n"
        files[f"{base}/effective_affinity"] = "1\n"
        files[f"{base}/effective_affinity_list"] = "0\n"
        files[f"{base}/node"] = "0\n"
        files[f"{base}/{irq.name}/"] = ""
    return files


def write_tree(root: Path, files: dict[str, str]) -> None:
    for rel, content in files.items():
        path = root / rel
        if rel.endswith("/"):
            path.mkdir(parents=True, exist_ok=True)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)


def install(board_root: Path, layout: CpuLayout = DEFAULT_LAYOUT) -> None:
    """Write the fake sysfs and proc trees into a board's root (its overlay mount)."""
    write_tree(board_root / SYSFS_ROOT.lstrip("/"), sysfs_files(layout))
    write_tree(board_root / PROC_ROOT.lstrip("/"), proc_files(ncpus=layout.ncpus))
