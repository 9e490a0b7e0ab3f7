"""Board telemetry as Prometheus series, read from sysfs at scrape time (no sampling thread).

What the alert rules need besides the readings ``telemetry`` already takes: the thermal zones' trip
points (where the kernel starts throttling) and each CPU cluster's clock ceiling (``scaling_max_freq``:
the lowest of every request, thermal throttling and CPU caps included) next to the hardware maximum.
An absent or unreadable sensor yields no sample at all, never a 0 that would read as a measurement.
Units are Prometheus' base units: degrees Celsius, hertz, ratios 0..1.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from npudure.board import telemetry
from npudure.board.sysfs import numbered_children

MHZ = 1e6
_TRIP = re.compile(r"trip_point_(\d+)_temp")


def _number(path: Path) -> float | None:
    try:
        value = float(path.read_text().strip())
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def read_trip_points(sysfs_root: str | os.PathLike[str] = "/sys") -> list[tuple[str, str, str, float]]:
    """(zone name as telemetry names it, trip number, trip type, °C) for every readable trip point."""
    trips: list[tuple[str, str, str, float]] = []
    names = [r.name for r in telemetry.read_thermal(sysfs_root)]
    zones = numbered_children(Path(sysfs_root) / "class" / "thermal", "thermal_zone")
    for name, (_, zone) in zip(names, zones, strict=False):
        for number in _trip_numbers(zone):
            millidegrees = _number(zone / f"trip_point_{number}_temp")
            try:
                kind = (zone / f"trip_point_{number}_type").read_text().strip()
            except (OSError, UnicodeDecodeError):
                kind = "unknown"
            if millidegrees is not None:
                trips.append((name, str(number), kind, millidegrees / 1000.0))
    return trips


def _trip_numbers(zone: Path) -> list[int]:
    try:
        names = [entry.name for entry in zone.iterdir()]
    except OSError:
        return []
    return sorted(int(m.group(1)) for n in names if (m := _TRIP.fullmatch(n)))


class BoardCollector(Collector):
    """``npudure_board_*``: temperatures, trip points, CPU and NPU clocks, NPU load.

    ``emulated_cpu_mhz``: an emulated board's modelled CPU clock (the sim's cap, or its top clock
    uncapped), exported as ``policy="emulated"`` beside whatever the sysfs tree holds.
    """

    def __init__(
        self,
        sysfs_root: str | os.PathLike[str] = "/sys",
        emulated_cpu_mhz: Callable[[], float | None] | None = None,
    ) -> None:
        self.sysfs_root = sysfs_root
        self.emulated_cpu_mhz = emulated_cpu_mhz

    def collect(self) -> Iterator[GaugeMetricFamily]:
        root = self.sysfs_root
        temps = GaugeMetricFamily(
            "npudure_board_temperature_celsius", "Thermal zone temperature", labels=["zone"]
        )
        for reading in telemetry.read_thermal(root):
            if reading.value is not None:
                temps.add_metric([reading.name], reading.value)
        yield temps

        trips = GaugeMetricFamily(
            "npudure_board_thermal_trip_celsius",
            "Thermal zone trip point (passive: the kernel starts throttling there)",
            labels=["zone", "trip", "type"],
        )
        for zone, number, kind, celsius in read_trip_points(root):
            trips.add_metric([zone, number, kind], celsius)
        yield trips

        current = GaugeMetricFamily(
            "npudure_board_cpu_frequency_hertz", "CPU cluster clock now", labels=["policy", "cpus"]
        )
        ceiling = GaugeMetricFamily(
            "npudure_board_cpu_frequency_max_hertz",
            "CPU cluster clock ceiling now (scaling_max_freq: thermal throttling and caps included)",
            labels=["policy"],
        )
        hardware = GaugeMetricFamily(
            "npudure_board_cpu_frequency_hardware_max_hertz",
            "CPU cluster's highest clock (cpuinfo_max_freq)",
            labels=["policy"],
        )
        readings, cpus = telemetry.read_cpu_freq(root)
        cpu_root = Path(root) / "devices" / "system" / "cpu"
        for reading in readings:
            if reading.value is not None:
                current.add_metric([reading.name, cpus.get(reading.name, "")], reading.value * MHZ)
            folder = cpu_root / "cpufreq" / reading.name
            if not folder.is_dir():  # per-CPU layout: cpuN/cpufreq
                folder = cpu_root / reading.name / "cpufreq"
            for family, file in ((ceiling, "scaling_max_freq"), (hardware, "cpuinfo_max_freq")):
                khz = _number(folder / file)
                if khz is not None:
                    family.add_metric([reading.name], khz * 1e3)
        modelled = self.emulated_cpu_mhz() if self.emulated_cpu_mhz else None
        if modelled is not None:
            current.add_metric(["emulated", ""], modelled * MHZ)
        yield current
        yield ceiling
        yield hardware

        npu_freq = GaugeMetricFamily("npudure_board_npu_frequency_hertz", "NPU clock now")
        npu_load = GaugeMetricFamily("npudure_board_npu_load_ratio", "NPU core load", labels=["core"])
        for reading in telemetry.read_npu(root):
            if reading.value is None:
                continue
            if reading.name == "freq":
                npu_freq.add_metric([], reading.value * MHZ)
            else:
                npu_load.add_metric([reading.name.removesuffix("_load")], reading.value / 100.0)
        yield npu_freq
        yield npu_load
