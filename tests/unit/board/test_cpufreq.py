"""CPU clock caps on fake cpufreq trees: write, read back, restore, and refuse what cannot work."""

from __future__ import annotations

from pathlib import Path

import pytest

from npudure.board import cpufreq
from npudure.board.cpufreq import CpuFreqError

LITTLE_KHZ = [408000, 600000, 816000, 1008000, 1200000, 1416000, 1608000, 1800000]
BIG_KHZ = [408000, 600000, 816000, 1008000, 1200000, 1608000, 2016000, 2208000]


def make_policy(root: Path, name: str, cpus: list[int], khz: list[int] | None, hw_max: int) -> Path:
    path = root / "devices" / "system" / "cpu" / "cpufreq" / name
    path.mkdir(parents=True)
    (path / "related_cpus").write_text(" ".join(map(str, cpus)) + "\n")
    (path / "scaling_max_freq").write_text(f"{hw_max}\n")
    (path / "cpuinfo_max_freq").write_text(f"{hw_max}\n")
    (path / "cpuinfo_min_freq").write_text("408000\n")
    (path / "scaling_governor").write_text("schedutil\n")
    (path / "scaling_available_governors").write_text("ondemand userspace powersave performance schedutil\n")
    if khz is not None:
        (path / "scaling_available_frequencies").write_text(" ".join(map(str, khz)) + " \n")
    return path


@pytest.fixture
def rk3576(tmp_path: Path) -> Path:
    make_policy(tmp_path, "policy0", [0, 1, 2, 3], LITTLE_KHZ, 1800000)
    make_policy(tmp_path, "policy4", [4, 5, 6, 7], BIG_KHZ, 2208000)
    return tmp_path


def max_khz(root: Path, policy: str) -> str:
    return (root / "devices/system/cpu/cpufreq" / policy / "scaling_max_freq").read_text().strip()


def test_available_policies(rk3576: Path) -> None:
    policies = cpufreq.available_policies(rk3576)
    assert [(p.name, p.cpus) for p in policies] == [("policy0", (0, 1, 2, 3)), ("policy4", (4, 5, 6, 7))]
    assert [cpufreq.read_max_freq_mhz(p) for p in policies] == [1800, 2208]
    assert cpufreq.available_frequencies_mhz(policies[1]) == [408, 600, 816, 1008, 1200, 1608, 2016, 2208]


def test_cap_only_the_policies_covering_the_cpus_and_restore(rk3576: Path) -> None:
    previous = cpufreq.set_max_freq(1008, cpus=[4, 5, 6, 7], sysfs_root=rk3576)
    assert previous == {"policy4": 2208000}
    assert max_khz(rk3576, "policy4") == "1008000"
    assert max_khz(rk3576, "policy0") == "1800000"
    cpufreq.restore(previous, rk3576)
    assert max_khz(rk3576, "policy4") == "2208000"


def test_cap_all_policies_by_default_and_by_name(rk3576: Path) -> None:
    previous = cpufreq.set_max_freq(816, sysfs_root=rk3576)
    assert previous == {"policy0": 1800000, "policy4": 2208000}
    assert (max_khz(rk3576, "policy0"), max_khz(rk3576, "policy4")) == ("816000", "816000")
    assert cpufreq.set_max_freq(600, sysfs_root=rk3576, policy="policy0") == {"policy0": 816000}
    assert max_khz(rk3576, "policy4") == "816000"


def test_capped_restores_on_exception_and_keyboard_interrupt(rk3576: Path) -> None:
    with cpufreq.capped(1200, cpus=[4], sysfs_root=rk3576) as previous:
        assert previous == {"policy4": 2208000}
        assert max_khz(rk3576, "policy4") == "1200000"
    assert max_khz(rk3576, "policy4") == "2208000"
    with pytest.raises(RuntimeError), cpufreq.capped(600, cpus=[4], sysfs_root=rk3576):
        assert max_khz(rk3576, "policy4") == "600000"
        raise RuntimeError("bench failed")
    assert max_khz(rk3576, "policy4") == "2208000"
    with pytest.raises(KeyboardInterrupt), cpufreq.capped(816, sysfs_root=rk3576):
        raise KeyboardInterrupt
    assert (max_khz(rk3576, "policy0"), max_khz(rk3576, "policy4")) == ("1800000", "2208000")


def test_a_clamped_cap_raises_names_the_file_and_rolls_back(
    rk3576: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_write = cpufreq._write

    def kernel_clamps_policy4(path: Path, value: str) -> None:
        # The kernel keeps a lower limit (e.g. thermal) in force on the big cluster.
        real_write(path, "816000" if "policy4" in str(path) and value == "1608000" else value)

    monkeypatch.setattr(cpufreq, "_write", kernel_clamps_policy4)
    with pytest.raises(CpuFreqError) as info:
        cpufreq.set_max_freq(1608, sysfs_root=rk3576)
    message = str(info.value)
    assert str(rk3576 / "devices/system/cpu/cpufreq/policy4/scaling_max_freq") in message
    assert "'816000'" in message
    # policy0 had been capped already: all or nothing.
    assert (max_khz(rk3576, "policy0"), max_khz(rk3576, "policy4")) == ("1800000", "2208000")


def test_a_clock_the_driver_does_not_offer_is_refused_before_writing(rk3576: Path) -> None:
    with pytest.raises(CpuFreqError, match=r"cannot run at 1500 MHz; choose one of \[408, .*2208\]"):
        cpufreq.set_max_freq(1500, cpus=[4], sysfs_root=rk3576)
    assert max_khz(rk3576, "policy4") == "2208000"


def test_out_of_range_without_a_frequency_list(tmp_path: Path) -> None:
    make_policy(tmp_path, "policy0", [0, 1], None, 1800000)
    with pytest.raises(CpuFreqError, match="between 408 and 1800 MHz"):
        cpufreq.set_max_freq(2400, sysfs_root=tmp_path)
    assert cpufreq.set_max_freq(1500, sysfs_root=tmp_path) == {"policy0": 1800000}
    assert max_khz(tmp_path, "policy0") == "1500000"


@pytest.mark.parametrize("mhz", [0, -5])
def test_non_positive_cap_is_refused(rk3576: Path, mhz: int) -> None:
    with pytest.raises(CpuFreqError, match="remove_cap"):
        cpufreq.set_max_freq(mhz, sysfs_root=rk3576)


def test_no_cpufreq_says_what_to_do(tmp_path: Path) -> None:
    (tmp_path / "devices/system/cpu/cpu0").mkdir(parents=True)
    assert cpufreq.available_policies(tmp_path) == []
    with pytest.raises(CpuFreqError, match=r"exposes no cpufreq.*sim backend's cap"):
        cpufreq.set_max_freq(1008, sysfs_root=tmp_path)
    with pytest.raises(CpuFreqError, match="exposes no cpufreq"), cpufreq.capped(1008, sysfs_root=tmp_path):
        pytest.fail("the body must not run without cpufreq")


def test_unknown_policy_or_cpus_list_what_exists(rk3576: Path) -> None:
    with pytest.raises(CpuFreqError, match=r"no cpufreq policy named 'policy9'.*policy0 \(cpus 0-3\)"):
        cpufreq.set_max_freq(1008, sysfs_root=rk3576, policy="policy9")
    with pytest.raises(CpuFreqError, match="no cpufreq policy covers cpus 8-9"):
        cpufreq.set_max_freq(1008, cpus=[8, 9], sysfs_root=rk3576)


def test_garbled_current_value_is_refused_before_writing(rk3576: Path) -> None:
    (rk3576 / "devices/system/cpu/cpufreq/policy4/scaling_max_freq").write_text("junk\n")
    with pytest.raises(CpuFreqError, match="policy4/scaling_max_freq holds 'junk'"):
        cpufreq.set_max_freq(1008, sysfs_root=rk3576)
    assert max_khz(rk3576, "policy0") == "1800000"


def test_remove_cap_goes_back_to_the_hardware_maximum(rk3576: Path) -> None:
    cpufreq.set_max_freq(600, sysfs_root=rk3576)
    assert cpufreq.remove_cap(cpus=[5], sysfs_root=rk3576) == {"policy4": 600000}
    assert (max_khz(rk3576, "policy0"), max_khz(rk3576, "policy4")) == ("600000", "2208000")


def test_governor(rk3576: Path) -> None:
    gov = rk3576 / "devices/system/cpu/cpufreq/policy4/scaling_governor"
    previous = cpufreq.set_governor("performance", cpus=[4], sysfs_root=rk3576)
    assert previous == {"policy4": "schedutil"}
    assert gov.read_text().strip() == "performance"
    with pytest.raises(CpuFreqError, match="no governor 'turbo'"):
        cpufreq.set_governor("turbo", sysfs_root=rk3576)
    cpufreq.restore_governors(previous, rk3576)
    assert gov.read_text().strip() == "schedutil"


def test_per_cpu_folders_without_policies(tmp_path: Path) -> None:
    for cpu in (0, 1):
        folder = tmp_path / f"devices/system/cpu/cpu{cpu}/cpufreq"
        folder.mkdir(parents=True)
        (folder / "scaling_max_freq").write_text("1200000\n")
    policies = cpufreq.available_policies(tmp_path)
    assert [(p.name, p.cpus) for p in policies] == [("cpu0", (0,)), ("cpu1", (1,))]
    assert cpufreq.set_max_freq(816, cpus=[1], sysfs_root=tmp_path) == {"cpu1": 1200000}
    assert (tmp_path / "devices/system/cpu/cpu1/cpufreq/scaling_max_freq").read_text() == "816000"
