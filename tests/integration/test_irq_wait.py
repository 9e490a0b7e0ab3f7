"""The IRQ unit waits for the NPU's interrupt line, fails loudly without one, and bans it from irqbalance."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import pytest
from helpers.ansible import BIN, render
from helpers.cli import run_npudure

from npudure.affinity import irq

HEADER = "           CPU0       CPU1       CPU2       CPU3       CPU4       CPU5       CPU6       CPU7\n"
NO_NPU = HEADER + " 11:   9   0   0   0   0   0   0   0     GICv3  27 Level     arch_timer\n"
WITH_NPU = (
    NO_NPU
    + " 87:   0   0   0   0  12   3   0   0     GICv3 142 Level     27700000.npu\n"
    + " 90:   0   0   0   0   1   0   0   0     GICv3 150 Level     galcore\n"
)


def fake_board(root: Path, interrupts: str) -> tuple[Path, Path]:
    sysfs, proc = root / "sys", root / "proc"
    for cpu in range(8):
        path = sysfs / f"devices/system/cpu/cpu{cpu}"
        path.mkdir(parents=True)
        (path / "cpu_capacity").write_text("1024\n" if cpu >= 4 else "530\n")
    proc.mkdir()
    (proc / "interrupts").write_text(interrupts)
    for number in (11, 87, 90):
        (proc / f"irq/{number}").mkdir(parents=True)
        (proc / f"irq/{number}/smp_affinity").write_text("ff\n")
    return sysfs, proc


def apply(sysfs: Path, proc: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_npudure("affinity", "apply", "--sysfs-root", str(sysfs), "--proc-root", str(proc), *extra)


def test_no_npu_line_fails_loudly_after_the_wait(tmp_path: Path) -> None:
    sysfs, proc = fake_board(tmp_path, NO_NPU)
    started = time.monotonic()
    result = apply(sysfs, proc, "--wait-npu", "1")
    assert time.monotonic() - started >= 1.0
    assert result.returncode == 3
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "no NPU interrupt" in lines[0] and "rknpu" in lines[0]
    # Without --wait-npu the old behaviour stays: nothing to steer is not an error.
    assert apply(sysfs, proc).returncode == 0


def test_a_late_npu_probe_is_waited_for_and_steered(tmp_path: Path) -> None:
    sysfs, proc = fake_board(tmp_path, NO_NPU)
    late = threading.Timer(0.5, lambda: (proc / "interrupts").write_text(WITH_NPU))
    late.start()
    try:
        found = irq.wait_for_npu_irqs(proc, timeout_s=20, interval_s=0.05)
    finally:
        late.cancel()
    assert [(d.irq, d.device) for d in found] == [(87, "27700000.npu")]
    result = apply(sysfs, proc, "--wait-npu", "5")
    assert result.returncode == 0, result.stderr
    assert (proc / "irq/87/smp_affinity").read_text().strip() == "f"
    assert (proc / "irq/90/smp_affinity").read_text().strip() == "ff"  # the GPU only with --include-gpu
    assert apply(sysfs, proc, "--include-gpu").returncode == 0
    assert (proc / "irq/90/smp_affinity").read_text().strip() == "f"


def test_negative_wait_is_one_clear_line(tmp_path: Path) -> None:
    sysfs, proc = fake_board(tmp_path, WITH_NPU)
    result = apply(sysfs, proc, "--wait-npu", "-1")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "--wait-npu must be 0 or more" in result.stderr


# ---------------------------------------------------------------- the role's files

needs_ansible = pytest.mark.skipif(
    not (BIN / "ansible-playbook").exists(), reason="ansible-core is not installed"
)
TEMPLATES = [
    "npudure-irq-affinity.service.j2",
    "npudure-irqbalance-policy.sh.j2",
    "irqbalance-npudure.conf.j2",
]


def _policy(script: Path, number: int) -> str:
    argv = ["sh", str(script), "/sys/devices/x", str(number)]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    assert result.returncode == 0, result.stderr  # irqbalance expects 0 from a policy script
    return result.stdout.strip()


@needs_ansible
@pytest.mark.parametrize("gpu", [False, True])
def test_unit_waits_for_the_npu_and_irqbalance_is_banned_from_its_lines(tmp_path: Path, gpu: bool) -> None:
    _, proc = fake_board(tmp_path / "board", WITH_NPU)
    extra = {"npudure_irq_affinity_proc_root": str(proc), "npudure_irq_affinity_include_gpu": gpu}
    out = render(tmp_path, "npudure_irq_affinity", "boards", TEMPLATES, extra)
    unit = (out / "board1-npudure-irq-affinity.service").read_text().splitlines()
    start = next(line for line in unit if line.startswith("ExecStart="))
    assert start.endswith(" --wait-npu 60") and ("--include-gpu" in start) == gpu
    assert "TimeoutStartSec=90" in unit
    script = out / "board1-npudure-irqbalance-policy.sh"
    assert _policy(script, 87) == "ban=true"
    assert _policy(script, 11) == ""
    assert _policy(script, 90) == ("ban=true" if gpu else "")
    assert _policy(script, 999) == ""
    dropin = (out / "board1-irqbalance-npudure.conf").read_text().splitlines()
    assert "ExecStart=" in dropin  # clears the distribution's line before adding ours
    assert any("--policyscript=/usr/local/libexec/npudure-irqbalance-policy" in line for line in dropin)


@needs_ansible
def test_the_unit_can_be_told_not_to_require_an_npu(tmp_path: Path) -> None:
    out = render(
        tmp_path, "npudure_irq_affinity", "boards", TEMPLATES[:1], {"npudure_irq_affinity_require_npu": False}
    )
    unit = (out / "board1-npudure-irq-affinity.service").read_text()
    assert "--wait-npu" not in unit
