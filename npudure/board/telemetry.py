"""Board telemetry from sysfs, procfs and debugfs, where the board exposes it.

A sensor that is missing or unreadable is reported as absent (``None``), never as 0: a 0 °C zone or
a 0 MHz clock would look like a reading and mislead every consumer (thermal limit, bench logs).
All roots are parameters so that emulated boards and tests can hand in their own trees.
"""

from __future__ import annotations

import math
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from npudure.affinity.cores import format_cpu_list, parse_cpu_list
from npudure.board.sysfs import numbered_children

if TYPE_CHECKING:
    from npudure.proto import inference_pb2 as pb


class Reading(NamedTuple):
    name: str
    value: float | None
    unit: str


@dataclass(frozen=True)
class TelemetrySample:
    thermal_c: list[Reading] = field(default_factory=list)
    cpu_freq_mhz: list[Reading] = field(default_factory=list)
    npu: list[Reading] = field(default_factory=list)
    process_cpu_user_s: float = 0.0
    process_cpu_system_s: float = 0.0
    boot_id: str | None = None
    sampled_at: float = 0.0
    # Which CPUs each cpu_freq_mhz reading covers, e.g. {"policy4": "4-7"} (from related_cpus).
    cpu_freq_cpus: dict[str, str] = field(default_factory=dict)


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None


def _read_number(path: Path) -> float | None:
    text = _read(path)
    if text is None:
        return None
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) else None  # "nan" parses, but is no reading


def _scaled(path: Path, divisor: float) -> float | None:
    value = _read_number(path)
    return None if value is None else value / divisor


def read_thermal(sysfs_root: str | os.PathLike[str] = "/sys") -> list[Reading]:
    readings: list[Reading] = []
    seen: set[str] = set()
    for number, zone in numbered_children(Path(sysfs_root) / "class" / "thermal", "thermal_zone"):
        name = (_read(zone / "type") or "").strip() or zone.name
        if name in seen:  # two zones of one type stay apart
            name = f"{name}#{number}"
        seen.add(name)
        readings.append(Reading(name, _scaled(zone / "temp", 1000.0), "C"))
    return readings


def read_cpu_freq(sysfs_root: str | os.PathLike[str] = "/sys") -> tuple[list[Reading], dict[str, str]]:
    """Current clock per cpufreq policy (cluster), or per CPU when the kernel has no policyN folders."""
    cpu_root = Path(sysfs_root) / "devices" / "system" / "cpu"
    readings: list[Reading] = []
    cpus: dict[str, str] = {}
    policies = numbered_children(cpu_root / "cpufreq", "policy")
    if policies:
        for _, policy in policies:
            readings.append(Reading(policy.name, _scaled(policy / "scaling_cur_freq", 1000.0), "MHz"))
            related = _read(policy / "related_cpus") or _read(policy / "affected_cpus")
            try:
                cpus[policy.name] = format_cpu_list(parse_cpu_list(related or ""))
            except ValueError:
                cpus[policy.name] = ""
        return readings, cpus
    for number, cpu in numbered_children(cpu_root, "cpu"):
        if (cpu / "cpufreq").is_dir():
            readings.append(Reading(cpu.name, _scaled(cpu / "cpufreq" / "scaling_cur_freq", 1000.0), "MHz"))
            cpus[cpu.name] = str(number)
    return readings, cpus


_CORE_LOAD = re.compile(r"Core(\d+):\s*(\d*)\s*%")
_SINGLE_LOAD = re.compile(r"NPU load:\s*(\d*)\s*%")


def parse_npu_load(text: str) -> list[Reading]:
    """``"NPU load:  Core0: 35%, Core1: 40%,"`` -> core0_load 35, core1_load 40; ``[]`` when garbled.

    The driver prints the percentage with ``%2.d``, which prints nothing at all for 0, so
    ``"Core0:   %"`` means 0 %.
    """
    cores = _CORE_LOAD.findall(text)
    if cores:
        return [Reading(f"core{n}_load", float(v or 0), "%") for n, v in cores]
    single = _SINGLE_LOAD.search(text)
    if single:
        return [Reading("load", float(single.group(1) or 0), "%")]
    return []


def read_npu(
    sysfs_root: str | os.PathLike[str] = "/sys",
    proc_root: str | os.PathLike[str] = "/proc",
    debugfs_root: str | os.PathLike[str] = "/sys/kernel/debug",
) -> list[Reading]:
    readings: list[Reading] = []
    # Load: debugfs (root only) first, then /proc/rknpu (kernels built with the procfs debugger).
    loads: list[Reading] = []
    for base in (Path(debugfs_root) / "rknpu", Path(proc_root) / "rknpu"):
        text = _read(base / "load")
        if text is not None:
            loads = parse_npu_load(text)
            if loads:
                break
    readings.extend(loads or [Reading("load", None, "%")])
    # Clock: devfreq's cur_freq (Hz, readable without root), else rknpu's freq (Hz from clk_get_rate).
    freq = None
    for device in sorted((Path(sysfs_root) / "class" / "devfreq").glob("*.npu")):
        freq = _scaled(device / "cur_freq", 1e6)
        if freq is not None:
            break
    if freq is None:
        for base in (Path(debugfs_root) / "rknpu", Path(proc_root) / "rknpu"):
            freq = _scaled(base / "freq", 1e6)
            if freq is not None:
                break
    readings.append(Reading("freq", freq, "MHz"))
    return readings


def read_boot_id(proc_root: str | os.PathLike[str] = "/proc") -> str | None:
    text = _read(Path(proc_root) / "sys" / "kernel" / "random" / "boot_id")
    return (text or "").strip() or None


def sample(
    sysfs_root: str | os.PathLike[str] = "/sys",
    proc_root: str | os.PathLike[str] = "/proc",
    debugfs_root: str | os.PathLike[str] = "/sys/kernel/debug",
) -> TelemetrySample:
    """One snapshot of everything readable. Never raises for a missing or garbled sensor."""
    cpu_freq, cpu_freq_cpus = read_cpu_freq(sysfs_root)
    times = os.times()
    return TelemetrySample(
        thermal_c=read_thermal(sysfs_root),
        cpu_freq_mhz=cpu_freq,
        npu=read_npu(sysfs_root, proc_root, debugfs_root),
        process_cpu_user_s=times.user,
        process_cpu_system_s=times.system,
        boot_id=read_boot_id(proc_root),
        sampled_at=time.time(),
        cpu_freq_cpus=cpu_freq_cpus,
    )


def max_temp_c(sample: TelemetrySample) -> float | None:
    """Hottest readable thermal zone; None when no zone could be read."""
    values = [r.value for r in sample.thermal_c if r.value is not None]
    return max(values) if values else None


def to_proto(sample: TelemetrySample) -> pb.Telemetry:
    """The ``Telemetry`` message; an absent reading keeps its name and leaves ``value`` unset."""
    from npudure.proto import inference_pb2 as pb

    def readings(items: list[Reading]) -> list[pb.Reading]:
        out = []
        for r in items:
            msg = pb.Reading(name=r.name, unit=r.unit)
            if r.value is not None:
                msg.value = r.value
            out.append(msg)
        return out

    return pb.Telemetry(
        thermal_c=readings(sample.thermal_c),
        cpu_freq_mhz=readings(sample.cpu_freq_mhz),
        npu=readings(sample.npu),
        process_cpu_user_s=sample.process_cpu_user_s,
        process_cpu_system_s=sample.process_cpu_system_s,
        sampled_at=sample.sampled_at,
    )
