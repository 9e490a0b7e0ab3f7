"""big.LITTLE split, CPU list/mask formats, thread pinning and NPU IRQ steering on fake sysfs/procfs."""

from __future__ import annotations

import errno
import json
import logging
import os
import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from npudure import cli
from npudure.affinity import cores, irq
from npudure.affinity.cores import (
    cpu_mask_hex,
    format_cpu_list,
    parse_cpu_list,
    parse_cpu_mask_hex,
    split_big_little,
)

RK3588 = {0: 414, 1: 414, 2: 414, 3: 414, 4: 1003, 5: 1003, 6: 1024, 7: 1024}
RK3576 = {0: 530, 1: 530, 2: 530, 3: 530, 4: 1024, 5: 1024, 6: 1024, 7: 1024}


def interrupts_row(label: str, counts: list[int], rest: str) -> str:
    """One /proc/interrupts row in the kernel's layout (these run past 110 columns, hence built)."""
    return f"{label:>4}:" + "".join(f"{c:>11}" for c in counts) + f"     {rest}\n"


IDLE = [0] * 8
INTERRUPTS_RK3576 = (
    " " * 11
    + "".join(f"CPU{n:<8}" for n in range(8))
    + "\n"
    + interrupts_row(
        "11", [51234, 40311, 38000, 37555, 91234, 80012, 79000, 78123], "GICv3  30 Level     arch_timer"
    )
    + interrupts_row("27", [0, 0, 0, 0, 1234, 567, 0, 0], "GICv3 142 Level     27700000.npu")
    + interrupts_row("28", [0, 0, 0, 0, 890, 0, 0, 0], "GICv3 143 Level     27700000.npu")
    + interrupts_row("40", [12, *IDLE[1:]], "GICv3 125 Level     galcore")
    + interrupts_row("41", [3, *IDLE[1:]], "GICv3 126 Level     fb000000.gpu, fb000000.mmu")
    + interrupts_row("55", IDLE, "GICv3 200 Level     fdab0000.npu, fdac0000.npu")
    + interrupts_row("60", [9, *IDLE[1:]], "GICv3 210 Level     rknpu-npuish")
    + interrupts_row("IPI0", list(range(1000, 1008)), "  Rescheduling interrupts")
    + interrupts_row("NMI", IDLE, "Non-maskable interrupts")
    + interrupts_row("LOC", [100] * 8, "Local timer interrupts")
    + "Err:          0\n"
)


def make_sysfs(root: Path, capacities: dict[int, int]) -> Path:
    cpu_root = root / "devices" / "system" / "cpu"
    for cpu, cap in capacities.items():
        (cpu_root / f"cpu{cpu}").mkdir(parents=True, exist_ok=True)
        (cpu_root / f"cpu{cpu}" / "cpu_capacity").write_text(f"{cap}\n")
    # Folders that look like CPUs to a sloppy glob must not be read as CPUs.
    (cpu_root / "cpufreq").mkdir(parents=True, exist_ok=True)
    (cpu_root / "cpuidle").mkdir(parents=True, exist_ok=True)
    return root


def make_proc(root: Path, interrupts: str | None, masks: dict[int, str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    if interrupts is not None:
        (root / "interrupts").write_text(interrupts)
    for number, mask in masks.items():
        (root / "irq" / str(number)).mkdir(parents=True, exist_ok=True)
        (root / "irq" / str(number) / "smp_affinity").write_text(mask + "\n")
    return root


@pytest.fixture
def eight_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pretend this host has the board's 8 CPUs (the real one has 2)."""
    monkeypatch.setattr(cores, "runnable_cpus", lambda: set(range(8)))


@pytest.fixture
def board(tmp_path: Path) -> tuple[Path, Path]:
    sysfs = make_sysfs(tmp_path / "sys", RK3576)
    proc = make_proc(tmp_path / "proc", INTERRUPTS_RK3576, {27: "ff", 28: "ff", 40: "ff", 41: "ff", 55: "0f"})
    return sysfs, proc


# ---------------------------------------------------------------- split


def test_rk3588_big_cluster_includes_the_1003_cores() -> None:
    split = split_big_little(RK3588)
    assert not split.uniform
    assert split.big == (4, 5, 6, 7)
    assert split.little == (0, 1, 2, 3)
    assert "414" in split.reason and "1003" in split.reason


def test_rk3576_split() -> None:
    split = split_big_little(RK3576)
    assert (split.big, split.little, split.uniform) == ((4, 5, 6, 7), (0, 1, 2, 3), False)


@pytest.mark.parametrize(
    "capacities",
    [{n: 1024 for n in range(8)}, {0: 1000, 1: 1024}, {0: 1024}, {}],
    ids=["uniform", "small-gap", "single-cpu", "no-sysfs"],
)
def test_no_split_means_nothing_pinned(capacities: dict[int, int]) -> None:
    split = split_big_little(capacities)
    assert split.uniform
    assert split.big == () and split.little == ()
    assert "nothing is pinned" in split.reason


def test_split_goes_at_the_largest_gap_not_the_first() -> None:
    split = split_big_little({0: 400, 1: 450, 2: 1024, 3: 1024})
    assert split.big == (2, 3)
    assert split.little == (0, 1)


def test_min_gap_is_respected() -> None:
    caps = {0: 1000, 1: 1150}
    assert split_big_little(caps).uniform
    assert split_big_little(caps, min_gap=1.1).big == (1,)


def test_read_capacities_from_sysfs(tmp_path: Path) -> None:
    sysfs = make_sysfs(tmp_path, RK3588)
    (sysfs / "devices/system/cpu/cpu8").mkdir()  # no cpu_capacity file
    (sysfs / "devices/system/cpu/cpu9").mkdir()
    (sysfs / "devices/system/cpu/cpu9/cpu_capacity").write_text("garbage\n")
    (sysfs / "devices/system/cpu/cpu10").mkdir()
    (sysfs / "devices/system/cpu/cpu10/cpu_capacity").write_text("0\n")
    assert cores.read_capacities(sysfs) == RK3588
    split = cores.detect(sysfs)
    assert split.big == (4, 5, 6, 7)
    assert split.cpus == tuple(range(8))


def test_missing_sysfs_gives_no_split(tmp_path: Path) -> None:
    assert cores.read_capacities(tmp_path / "nowhere") == {}
    assert cores.detect(tmp_path / "nowhere").uniform


# ---------------------------------------------------------------- formats


@pytest.mark.parametrize(
    ("cpus", "text"),
    [([4, 5, 6, 7], "4-7"), ([0, 2, 3, 4, 7], "0,2-4,7"), ([3], "3"), ([], ""), ([1, 0, 1], "0-1")],
)
def test_format_cpu_list(cpus: list[int], text: str) -> None:
    assert format_cpu_list(cpus) == text


def test_parse_cpu_list_accepts_kernel_and_related_cpus_formats() -> None:
    assert parse_cpu_list("0-3,6\n") == (0, 1, 2, 3, 6)
    assert parse_cpu_list("4 5 6 7") == (4, 5, 6, 7)
    assert parse_cpu_list("") == ()
    for bad in ("a-b", "3-1", "1-", "0x3"):
        with pytest.raises(ValueError):
            parse_cpu_list(bad)


@pytest.mark.parametrize(
    ("cpus", "mask"),
    [
        ({0, 1, 2, 3}, "f"),
        ({4, 5, 6, 7}, "f0"),
        (set(), "0"),
        ({32}, "1,00000000"),
        (set(range(64)), "ffffffff,ffffffff"),
        ({0, 40}, "100,00000001"),
    ],
)
def test_cpu_mask_hex(cpus: set[int], mask: str) -> None:
    assert cpu_mask_hex(cpus) == mask
    assert parse_cpu_mask_hex(mask) == tuple(sorted(cpus))


def test_parse_cpu_mask_hex_tolerates_kernel_padding_and_rejects_garbage() -> None:
    assert parse_cpu_mask_hex("00000000,0000000f\n") == (0, 1, 2, 3)
    assert parse_cpu_mask_hex("0f") == (0, 1, 2, 3)
    for bad in ("", "xyz", "f,,f", "123456789"):
        with pytest.raises(ValueError):
            parse_cpu_mask_hex(bad)


@given(st.sets(st.integers(min_value=0, max_value=200), max_size=40))
def test_formats_round_trip(cpus: set[int]) -> None:
    assert parse_cpu_list(format_cpu_list(cpus)) == tuple(sorted(cpus))
    assert parse_cpu_mask_hex(cpu_mask_hex(cpus)) == tuple(sorted(cpus))


# ---------------------------------------------------------------- usable / pinning


def test_usable_drops_cpus_that_do_not_exist_and_says_why(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(cores, "runnable_cpus", lambda: {0, 1})
    with caplog.at_level(logging.INFO, logger="npudure.affinity.cores"):
        assert cores.usable([4, 5, 6, 7]) == ()
    assert "4-7 do not exist" in caplog.text and "not pinning" in caplog.text
    assert cores.usable([0, 1, 4]) == (0, 1)
    assert cores.pin_current_thread([4, 5, 6, 7]) is False


def test_usable_on_this_host_never_returns_missing_cpus() -> None:
    here = cores.runnable_cpus()
    assert cores.usable([100_000]) == ()
    assert set(cores.usable(range(1024))) == {cpu for cpu in here if cpu < 1024}


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="Linux only")
def test_pin_current_thread_moves_only_the_calling_thread() -> None:
    main_before = os.sched_getaffinity(0)
    target = min(main_before)
    seen: dict[str, object] = {}

    def worker() -> None:
        seen["pinned"] = cores.pin_current_thread([target, 100_000])
        seen["mask"] = os.sched_getaffinity(0)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join(timeout=10)
    assert seen == {"pinned": True, "mask": {target}}
    assert os.sched_getaffinity(0) == main_before


# ---------------------------------------------------------------- /proc/interrupts


def test_parse_interrupts_keeps_numbered_rows_only() -> None:
    rows = irq.parse_interrupts(INTERRUPTS_RK3576)
    assert [r.number for r in rows] == [11, 27, 28, 40, 41, 55, 60]
    npu = rows[1]
    assert npu.counts == (0, 0, 0, 0, 1234, 567, 0, 0)
    assert npu.devices == ("27700000.npu",)
    assert npu.chip == "GICv3 142 Level"
    assert rows[5].devices == ("fdab0000.npu", "fdac0000.npu")
    assert rows[5].name == "fdab0000.npu, fdac0000.npu"


def test_find_npu_irqs() -> None:
    rows = irq.parse_interrupts(INTERRUPTS_RK3576)
    found = irq.find_device_irqs(rows)
    assert [(d.irq, d.device) for d in found] == [
        (27, "27700000.npu"),
        (28, "27700000.npu"),
        (55, "fdab0000.npu, fdac0000.npu"),
    ]
    gpu = irq.find_device_irqs(rows, irq.GPU_PATTERNS)
    assert [(d.irq, d.device) for d in gpu] == [(40, "galcore"), (41, "fb000000.gpu")]


def test_parse_interrupts_of_empty_or_headerless_text() -> None:
    assert irq.parse_interrupts("") == []
    assert irq.find_device_irqs(irq.parse_interrupts("garbage\n")) == []


# ---------------------------------------------------------------- plan


def test_plan_on_an_rk3576(board: tuple[Path, Path], eight_cpus: None) -> None:
    sysfs, proc = board
    plan = irq.make_plan(sysfs, proc)
    assert (plan.agent_cpus, plan.io_cpus, plan.cpu_affinity) == ("4-7", "0-3", "4-7")
    assert [(a.irq, a.target_mask, a.target_cpus, a.current_mask) for a in plan.irqs] == [
        (27, "f", "0-3", "ff"),
        (28, "f", "0-3", "ff"),
        (55, "f", "0-3", "0f"),
    ]
    assert [a.needs_change for a in plan.irqs] == [True, True, False]
    assert plan.notes == ()
    with_gpu = irq.make_plan(sysfs, proc, include_gpu=True)
    assert [a.irq for a in with_gpu.irqs] == [27, 28, 40, 41, 55]


def test_plan_on_an_emulated_board_leaves_cpu_affinity_empty(
    board: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cores, "runnable_cpus", lambda: {0, 1})
    plan = irq.make_plan(*board)
    assert plan.agent_cpus == "4-7"
    assert plan.cpu_affinity == ""
    assert any("do not exist" in note for note in plan.notes)
    assert [a.target_mask for a in plan.irqs] == [
        "f",
        "f",
        "f",
    ]  # the board's own IRQ table still gets steered


@pytest.mark.parametrize(
    ("here", "expected"),
    [({0, 1, 2, 3, 4, 5}, "4-5"), ({0, 1, 2, 3, 4, 5, 6, 7}, "4-7"), ({0, 5, 7}, "5,7"), ({0, 1}, "")],
)
def test_plan_names_only_the_big_cpus_that_exist_here(
    board: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, here: set[int], expected: str
) -> None:
    # A fixed host view, so the check means the same on a 2-core VM as on an 8-core board.
    monkeypatch.setattr(cores, "runnable_cpus", lambda: here)
    plan = irq.make_plan(*board)
    assert plan.cpu_affinity == expected
    assert set(parse_cpu_list(plan.cpu_affinity)) == here & {4, 5, 6, 7}


def test_plan_on_uniform_cores_does_nothing(tmp_path: Path) -> None:
    sysfs = make_sysfs(tmp_path / "sys", {n: 1024 for n in range(4)})
    proc = make_proc(tmp_path / "proc", INTERRUPTS_RK3576, {27: "ff"})
    plan = irq.make_plan(sysfs, proc)
    assert plan.uniform and plan.irqs == () and plan.cpu_affinity == ""
    assert irq.apply_plan(plan, proc) == []
    assert (proc / "irq/27/smp_affinity").read_text() == "ff\n"


def test_plan_without_interrupts_or_npu(tmp_path: Path, eight_cpus: None) -> None:
    sysfs = make_sysfs(tmp_path / "sys", RK3588)
    plan = irq.make_plan(sysfs, tmp_path / "proc-missing")
    assert plan.irqs == ()
    assert any("cannot read" in note for note in plan.notes)
    proc = make_proc(tmp_path / "proc", "           CPU0\n  5:   1   IO-APIC   5-edge   ttyS0\n", {})
    plan = irq.make_plan(sysfs, proc)
    assert plan.irqs == ()
    assert any("no NPU interrupt" in note for note in plan.notes)


def test_plan_json_shape(board: tuple[Path, Path], eight_cpus: None) -> None:
    body = json.loads(json.dumps(irq.make_plan(*board).to_dict()))
    assert {"uniform", "big_cpus", "little_cpus", "cpu_affinity", "irqs"} <= set(body)
    assert body["irqs"][0] == {
        "irq": 27,
        "device": "27700000.npu",
        "target_mask": "f",
        "target_cpus": "0-3",
        "current_mask": "ff",
        "current_cpus": "0-7",
        "needs_change": True,
    }


# ---------------------------------------------------------------- apply


def _mask(proc: Path, number: int) -> str:
    return (proc / "irq" / str(number) / "smp_affinity").read_text().strip()


def test_apply_is_idempotent(board: tuple[Path, Path], eight_cpus: None) -> None:
    sysfs, proc = board
    changes = irq.apply_plan(irq.make_plan(sysfs, proc), proc)
    assert [(c.irq, c.status, c.before, c.after) for c in changes] == [
        (27, "changed", "ff", "f"),
        (28, "changed", "ff", "f"),
        (55, "unchanged", "0f", "0f"),
    ]
    assert _mask(proc, 27) == "f" and _mask(proc, 55) == "0f"
    again = irq.apply_plan(irq.make_plan(sysfs, proc), proc)
    assert [c.status for c in again] == ["unchanged"] * 3


def test_dry_run_writes_nothing(board: tuple[Path, Path], eight_cpus: None) -> None:
    sysfs, proc = board
    changes = irq.apply_plan(irq.make_plan(sysfs, proc), proc, dry_run=True)
    assert [c.status for c in changes] == ["would change", "would change", "unchanged"]
    assert _mask(proc, 27) == "ff"


def test_apply_reports_permission_errors_clearly(
    board: tuple[Path, Path], eight_cpus: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    sysfs, proc = board

    def refuse(path: Path, mask: str) -> None:
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(irq, "_write_mask", refuse)
    changes = irq.apply_plan(irq.make_plan(sysfs, proc), proc)
    failed = [c for c in changes if c.status == "failed"]
    assert [c.irq for c in failed] == [27, 28]
    assert str(proc / "irq/27/smp_affinity") in failed[0].error
    assert "EACCES" in failed[0].error and "run as root" in failed[0].error


def test_apply_detects_a_mask_the_kernel_did_not_take(
    board: tuple[Path, Path], eight_cpus: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    sysfs, proc = board
    monkeypatch.setattr(irq, "_write_mask", lambda path, mask: path.write_text("80\n"))
    changes = irq.apply_plan(irq.make_plan(sysfs, proc), proc)
    assert changes[0].status == "failed"
    assert changes[0].after == "80"
    assert "read back" in changes[0].error


def test_apply_survives_a_vanished_irq(board: tuple[Path, Path], eight_cpus: None) -> None:
    sysfs, proc = board
    plan = irq.make_plan(sysfs, proc)
    (proc / "irq/28/smp_affinity").unlink()
    changes = irq.apply_plan(plan, proc)
    assert [c.status for c in changes] == ["changed", "failed", "unchanged"]
    assert "plan" in changes[1].error


# ---------------------------------------------------------------- CLI


def test_cli_plan_json(
    board: tuple[Path, Path], eight_cpus: None, capsys: pytest.CaptureFixture[str]
) -> None:
    sysfs, proc = board
    code = cli.main(["affinity", "plan", "--sysfs-root", str(sysfs), "--proc-root", str(proc), "--json"])
    body = json.loads(capsys.readouterr().out)
    assert code == 0
    assert (body["uniform"], body["big_cpus"], body["little_cpus"], body["cpu_affinity"]) == (
        False,
        "4-7",
        "0-3",
        "4-7",
    )
    assert [i["irq"] for i in body["irqs"]] == [27, 28, 55]


def test_cli_plan_table(
    board: tuple[Path, Path], eight_cpus: None, capsys: pytest.CaptureFixture[str]
) -> None:
    sysfs, proc = board
    assert cli.main(["affinity", "plan", "--sysfs-root", str(sysfs), "--proc-root", str(proc)]) == 0
    out = capsys.readouterr().out
    assert "CPUAffinity=4-7" in out
    assert "27700000.npu" in out and "ff (0-7)" in out


def test_cli_apply_exit_codes(
    board: tuple[Path, Path],
    eight_cpus: None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    sysfs, proc = board
    args = ["affinity", "apply", "--sysfs-root", str(sysfs), "--proc-root", str(proc)]
    assert cli.main([*args, "--dry-run"]) == 0
    assert _mask(proc, 27) == "ff"
    assert cli.main(args) == 0
    assert "changed" in capsys.readouterr().out
    assert _mask(proc, 27) == "f"
    (proc / "irq/27/smp_affinity").write_text("ff\n")

    def kernel_refuses(path: Path, mask: str) -> None:
        raise OSError(errno.EIO, "Input/output error", str(path))

    monkeypatch.setattr(irq, "_write_mask", kernel_refuses)
    assert cli.main([*args, "--json"]) == 1
    body = json.loads(capsys.readouterr().out)
    assert body["ok"] is False and body["changes"][0]["status"] == "failed"


def test_cli_apply_on_uniform_cores(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sysfs = make_sysfs(tmp_path / "sys", {0: 1024, 1: 1024})
    proc = make_proc(tmp_path / "proc", INTERRUPTS_RK3576, {27: "ff"})
    assert cli.main(["affinity", "apply", "--sysfs-root", str(sysfs), "--proc-root", str(proc)]) == 0
    assert "nothing to do" in capsys.readouterr().out
