"""Telemetry on fake sysfs/procfs/debugfs trees: present sensors read right, absent ones None (never 0)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from npudure.board import telemetry
from npudure.board.telemetry import Reading


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def roots(tmp_path: Path) -> tuple[Path, Path, Path]:
    sysfs, proc, debugfs = tmp_path / "sys", tmp_path / "proc", tmp_path / "debug"
    for root in (sysfs, proc, debugfs):
        root.mkdir()
    return sysfs, proc, debugfs


@pytest.fixture
def rk3576(roots: tuple[Path, Path, Path]) -> tuple[Path, Path, Path]:
    sysfs, proc, debugfs = roots
    zones = sysfs / "class" / "thermal"
    write(zones / "thermal_zone0" / "type", "soc-thermal\n")
    write(zones / "thermal_zone0" / "temp", "45123\n")
    write(zones / "thermal_zone1" / "type", "bigcore0-thermal\n")
    write(zones / "thermal_zone1" / "temp", "not a number\n")
    write(zones / "thermal_zone2" / "type", "npu-thermal\n")  # temp missing
    write(zones / "thermal_zone10" / "type", "ddr-thermal\n")
    write(zones / "thermal_zone10" / "temp", "-5000\n")
    (zones / "cooling_device0").mkdir()
    cpufreq = sysfs / "devices" / "system" / "cpu" / "cpufreq"
    write(cpufreq / "policy0" / "scaling_cur_freq", "1800000\n")
    write(cpufreq / "policy0" / "related_cpus", "0 1 2 3\n")
    write(cpufreq / "policy4" / "related_cpus", "4 5 6 7\n")  # cur freq unreadable
    write(sysfs / "class" / "devfreq" / "27700000.npu" / "cur_freq", "950000000\n")
    write(debugfs / "rknpu" / "load", "NPU load:  Core0: 35%, Core1: 40%,\n")
    write(debugfs / "rknpu" / "freq", "300000000\n")
    write(proc / "sys" / "kernel" / "random" / "boot_id", "c2402a23-56d9-4822-957c-c3410e44d704\n")
    return sysfs, proc, debugfs


def test_present_sensors_are_parsed(rk3576: tuple[Path, Path, Path]) -> None:
    before = time.time()
    s = telemetry.sample(*rk3576)
    assert s.thermal_c == [
        Reading("soc-thermal", 45.123, "C"),
        Reading("bigcore0-thermal", None, "C"),
        Reading("npu-thermal", None, "C"),
        Reading("ddr-thermal", -5.0, "C"),
    ]
    assert s.cpu_freq_mhz == [Reading("policy0", 1800.0, "MHz"), Reading("policy4", None, "MHz")]
    assert s.cpu_freq_cpus == {"policy0": "0-3", "policy4": "4-7"}
    # devfreq wins over debugfs' freq (which here says 300 MHz).
    assert s.npu == [
        Reading("core0_load", 35.0, "%"),
        Reading("core1_load", 40.0, "%"),
        Reading("freq", 950.0, "MHz"),
    ]
    assert s.boot_id == "c2402a23-56d9-4822-957c-c3410e44d704"
    assert s.process_cpu_user_s >= 0 and s.process_cpu_system_s >= 0
    assert before <= s.sampled_at <= time.time()
    assert telemetry.max_temp_c(s) == pytest.approx(45.123)


def test_everything_absent_is_none_not_zero(roots: tuple[Path, Path, Path]) -> None:
    s = telemetry.sample(*roots)
    assert s.thermal_c == [] and s.cpu_freq_mhz == []
    assert s.npu == [Reading("load", None, "%"), Reading("freq", None, "MHz")]
    assert s.boot_id is None
    assert telemetry.max_temp_c(s) is None


def test_roots_that_do_not_exist_do_not_raise(tmp_path: Path) -> None:
    s = telemetry.sample(tmp_path / "a", tmp_path / "b", tmp_path / "c")
    assert [r.value for r in s.npu] == [None, None]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("NPU load:  Core0: 35%, Core1: 40%,\n", [("core0_load", 35.0), ("core1_load", 40.0)]),
        # The driver's %2.d prints nothing for 0.
        (
            "NPU load:  Core0:   %, Core1: 12%, Core2: 100%,\n",
            [("core0_load", 0), ("core1_load", 12), ("core2_load", 100)],
        ),
        ("NPU load:  7%\n", [("load", 7.0)]),
        ("NPU load:   %\n", [("load", 0.0)]),
        ("\x00\x01garbage", []),
        ("", []),
    ],
)
def test_parse_npu_load(text: str, expected: list[tuple[str, float]]) -> None:
    assert [(r.name, r.value) for r in telemetry.parse_npu_load(text)] == expected


def test_garbled_npu_files_are_absent(roots: tuple[Path, Path, Path]) -> None:
    sysfs, proc, debugfs = roots
    write(debugfs / "rknpu" / "load", "unavailable\n")
    write(debugfs / "rknpu" / "freq", "unavailable\n")
    write(sysfs / "class" / "devfreq" / "27700000.npu" / "cur_freq", "nan\n")
    s = telemetry.sample(sysfs, proc, debugfs)
    assert s.npu == [Reading("load", None, "%"), Reading("freq", None, "MHz")]


def test_npu_falls_back_to_debugfs_freq_and_proc_load(roots: tuple[Path, Path, Path]) -> None:
    sysfs, proc, debugfs = roots
    write(debugfs / "rknpu" / "freq", "1000000000\n")
    write(proc / "rknpu" / "load", "NPU load:  Core0: 5%, Core1:  %, Core2: 9%,\n")
    s = telemetry.sample(sysfs, proc, debugfs)
    assert [(r.name, r.value) for r in s.npu] == [
        ("core0_load", 5.0),
        ("core1_load", 0.0),
        ("core2_load", 9.0),
        ("freq", 1000.0),
    ]


def test_cpu_freq_falls_back_to_per_cpu_folders(roots: tuple[Path, Path, Path]) -> None:
    sysfs = roots[0]
    cpu = sysfs / "devices" / "system" / "cpu"
    write(cpu / "cpu0" / "cpufreq" / "scaling_cur_freq", "816000\n")
    write(cpu / "cpu1" / "cpufreq" / "scaling_cur_freq", "garbage\n")
    (cpu / "cpu2").mkdir()  # no cpufreq at all: no reading
    readings, cpus = telemetry.read_cpu_freq(sysfs)
    assert readings == [Reading("cpu0", 816.0, "MHz"), Reading("cpu1", None, "MHz")]
    assert cpus == {"cpu0": "0", "cpu1": "1"}


def test_duplicate_zone_types_stay_apart(roots: tuple[Path, Path, Path]) -> None:
    zones = roots[0] / "class" / "thermal"
    for n, temp in ((0, "40000"), (1, "50000")):
        write(zones / f"thermal_zone{n}" / "type", "cpu-thermal\n")
        write(zones / f"thermal_zone{n}" / "temp", temp)
    write(zones / "thermal_zone2" / "temp", "30000")  # no type: named after the folder
    assert telemetry.read_thermal(roots[0]) == [
        Reading("cpu-thermal", 40.0, "C"),
        Reading("cpu-thermal#1", 50.0, "C"),
        Reading("thermal_zone2", 30.0, "C"),
    ]


def test_to_proto_leaves_absent_values_unset(rk3576: tuple[Path, Path, Path]) -> None:
    s = telemetry.sample(*rk3576)
    msg = telemetry.to_proto(s)
    thermal = {r.name: r for r in msg.thermal_c}
    assert thermal["soc-thermal"].HasField("value")
    assert thermal["soc-thermal"].value == pytest.approx(45.123)
    assert thermal["soc-thermal"].unit == "C"
    assert not thermal["bigcore0-thermal"].HasField("value")
    assert not thermal["npu-thermal"].HasField("value")
    assert [(r.name, r.HasField("value")) for r in msg.cpu_freq_mhz] == [
        ("policy0", True),
        ("policy4", False),
    ]
    assert [r.name for r in msg.npu] == ["core0_load", "core1_load", "freq"]
    assert msg.sampled_at == s.sampled_at
    assert msg.process_cpu_user_s == pytest.approx(s.process_cpu_user_s)
    # A round trip through bytes keeps "absent" apart from 0.
    again = type(msg).FromString(msg.SerializeToString())
    assert not {r.name: r for r in again.thermal_c}["npu-thermal"].HasField("value")
    assert {r.name: r for r in again.thermal_c}["ddr-thermal"].value == -5.0
