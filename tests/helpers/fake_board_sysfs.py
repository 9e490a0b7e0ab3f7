"""A writable fake board sysfs tree (thermal zones with trip points, cpufreq policies, NPU devfreq).

The agent reads it through ``affinity.sysfs_root``; a test changes a temperature or a clock by
rewriting a file, and the next scrape sees it.
"""

from __future__ import annotations

from pathlib import Path


class FakeBoardSysfs:
    def __init__(self, root: Path, cpufreq: bool = True) -> None:
        """``cpufreq=False``: no cpufreq policies (like the lab's boards, whose clock is emulated)."""
        self.root = root
        zone = root / "class" / "thermal" / "thermal_zone0"
        zone.mkdir(parents=True, exist_ok=True)
        (zone / "type").write_text("soc-thermal\n")
        # As the RK3588's soc-thermal: throttling from 85 °C (passive), shutdown at 115 °C (critical).
        for number, (kind, celsius) in enumerate((("passive", 85), ("critical", 115))):
            (zone / f"trip_point_{number}_type").write_text(f"{kind}\n")
            (zone / f"trip_point_{number}_temp").write_text(f"{celsius * 1000}\n")
        npu = root / "class" / "devfreq" / "fdab0000.npu"
        npu.mkdir(parents=True, exist_ok=True)
        self.set_temperature(45.0)
        for policy, cpus in (("policy0", "0 1 2 3"), ("policy4", "4 5 6 7")) if cpufreq else ():
            folder = root / "devices" / "system" / "cpu" / "cpufreq" / policy
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "related_cpus").write_text(cpus + "\n")
            (folder / "cpuinfo_max_freq").write_text("2256000\n")
        self.set_cpu_mhz(2256)
        self.set_npu_mhz(1000)

    def set_temperature(self, celsius: float) -> None:
        (self.root / "class" / "thermal" / "thermal_zone0" / "temp").write_text(f"{int(celsius * 1000)}\n")

    def set_cpu_mhz(self, mhz: int) -> None:
        """Clock and ceiling of every cluster (a cap or thermal throttling lowers both)."""
        for folder in sorted((self.root / "devices" / "system" / "cpu" / "cpufreq").glob("policy*")):
            (folder / "scaling_cur_freq").write_text(f"{mhz * 1000}\n")
            (folder / "scaling_max_freq").write_text(f"{mhz * 1000}\n")

    def set_npu_mhz(self, mhz: int) -> None:
        (self.root / "class" / "devfreq" / "fdab0000.npu" / "cur_freq").write_text(f"{mhz * 1_000_000}\n")
