"""The appliance on the emulated fleet: three systemd-nspawn boards and a scheduler host (root).

- bad input stops the run in the preflight, before the wheelhouse is built, with a message that
  names the host and the fix: an unreachable board, a missing model file, a model file the boards
  cannot serve (no model, not YOLOv8, another input size), a wrong backend name, a board whose RKNN
  runtime version differs from the fleet's, a board without the runtime;
- molecule test (syntax, create, converge, idempotence, verify) on the lab; the two wings as installed
  (the workshop on the scheduler host, never in a board's venv, and brought to board1 by benchmark.yml
  for its context sweep only); then a check-mode run on the converged fleet that changes nothing and
  does not fail, then molecule destroy.

Runs on the session's shared lab (tests/appliance/conftest.py): a lab that is already up is used and left
running; otherwise one is booted for the lab modules and removed after the last. Takes several minutes:
    sudo .venv/bin/pytest -m lab tests/appliance/test_site.py

The ``fleet`` and ``source`` fixtures are in tests/appliance/conftest.py.
"""

from __future__ import annotations

import json
import re
import secrets
import subprocess
from pathlib import Path

import pytest
import yaml
from helpers import ansible
from helpers.ansible import BIN, ROOT
from helpers.onnx_graphs import declared_onnx

SITE = ROOT / "playbooks" / "site.yml"
BENCHMARK = ROOT / "playbooks" / "benchmark.yml"
# Exit 0 when the host's venv has the workshop installed, 1 when not.
HAS_WORKSHOP = "/opt/npudure/venv/bin/pip show -q --disable-pip-version-check npudure-workshop"
# The marker of a run that got past the preflight: the wheelhouse play started.
WEDGE = ROOT / "tests" / "helpers" / "wedge_loop.py"
WHEELHOUSE_TASK = "TASK [npudure_wheelhouse : Build or reuse the wheelhouse"
# Every board in one batch: these tests check convergence, idempotence and check mode, which do not
# depend on the batch size, and nothing sends traffic meanwhile. The roll one board at a time (site.yml's
# default on an installed fleet) is tested under load in test_operations_fleet.py; here it only made
# each run 3x longer (converge+idempotence+verify 386 s, check mode 185 s on the 2-core host).
ALL_AT_ONCE = "npudure_serial=100%"

pytestmark = [pytest.mark.lab, pytest.mark.slow, pytest.mark.timeout(2400)]


def _playbook(inventory: Path, *extra: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return ansible.run([BIN / "ansible-playbook", "-i", inventory, *extra, SITE], timeout=timeout)


# ---------------------------------------------------------------- bad input stops early


def _assert_stopped_early(done: subprocess.CompletedProcess[str], *needles: str) -> str:
    output = done.stdout + done.stderr
    assert done.returncode != 0, output[-4000:]
    assert WHEELHOUSE_TASK not in output, "the run went past the preflight"
    flat = re.sub(r"\s+", " ", output)
    for needle in needles:
        assert needle in flat, f"{needle!r} not in:\n{output[-4000:]}"
    return flat


def test_unreachable_board_stops_the_run(fleet: Path, tmp_path: Path) -> None:
    inventory = yaml.safe_load(fleet.read_text())
    # Inside the lab's bridge subnet, and nobody has it.
    inventory["all"]["children"]["boards"]["hosts"]["board9"] = {"ansible_host": "10.231.0.99"}
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(inventory))
    done = _playbook(path, "-e", "npudure_preflight_connect_timeout_s=6", timeout=300)
    flat = _assert_stopped_early(done, "board9 (10.231.0.99) cannot be reached over SSH", "Fix:")
    assert "correct ansible_host for board9" in flat


def test_missing_model_file_stops_the_run(fleet: Path, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "yolov8n.onnx"
    extra = {"npudure_backend": "onnx", "npudure_agent_model_src": str(missing)}
    done = _playbook(fleet, "-e", json.dumps(extra), timeout=300)
    _assert_stopped_early(
        done,
        f"board1: model file {missing} (npudure_agent_model_src) is missing on the controller",
        "Fix: copy the .onnx model there or correct the path",
    )


@pytest.mark.parametrize(
    ("case", "extra", "needle"),
    [
        ("garbage", {}, "not a readable ONNX model (DecodeError); export it again"),
        (
            "classifier",
            {},
            "is not a YOLOv8 detection export: cannot read YOLOv8 outputs with shapes [1,1000]",
        ),
        (
            "user",
            {"npudure_agent_input_size": 640},
            "takes 320x320 frames but the agent config says input_size 640",
        ),
    ],
)
def test_a_model_the_boards_cannot_serve_stops_the_run(
    fleet: Path, tmp_path: Path, case: str, extra: dict, needle: str
) -> None:
    """Read on the controller (`npudure model check`) before the wheelhouse: a file that is no model, a
    classifier, and a user's 320 export on boards whose config says 640."""
    model = tmp_path / f"{case}.onnx"
    if case == "garbage":
        model.write_bytes(b"not a model at all")
    elif case == "classifier":
        declared_onnx(model, [1, 3, 224, 224], [[1, 1000]])
    else:
        declared_onnx(model, [1, 3, 320, 320], [[1, 7, 2100]], "{0: 'cat', 1: 'dog', 2: 'plate'}")
    variables = {"npudure_backend": "onnx", "npudure_agent_model_src": str(model), **extra}
    done = _playbook(fleet, "-e", json.dumps(variables), timeout=300)
    _assert_stopped_early(
        done, f"board1: model file {model}" if case != "garbage" else f"board1: {model}", needle
    )


def test_wrong_backend_name_stops_the_run(fleet: Path) -> None:
    done = _playbook(fleet, "-e", "npudure_backend=rknnn", timeout=300)
    _assert_stopped_early(
        done,
        "board1: backend 'rknnn' does not exist",
        "Fix: set npudure_backend (or npudure_agent_backend for this host) to one of rknn, onnx, sim",
    )


def _put_runtime(inventory: Path, host: str, content: str | None) -> None:
    module_args = (
        "path=/usr/lib/librknnrt.so state=absent"
        if content is None
        else json.dumps({"dest": "/usr/lib/librknnrt.so", "content": content, "mode": "0644"})
    )
    done = ansible.run(
        [
            BIN / "ansible",
            "-i",
            inventory,
            host,
            "-m",
            "file" if content is None else "copy",
            "-a",
            module_args,
        ],
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_runtime_version_mismatch_stops_the_run(fleet: Path, tmp_path: Path) -> None:
    # A fake librknnrt.so is enough: the preflight reads the version string, as `strings` would.
    fake = "\x7fELF fake runtime\nlibrknnrt version: {} (0123456789@2025-01-01T00:00:00)\n"
    model = tmp_path / "yolov8n.rknn"
    model.write_bytes(b"RKNN fake model")
    try:
        _put_runtime(fleet, "board1:board3", fake.format("2.3.2"))
        _put_runtime(fleet, "board2", fake.format("1.6.0"))
        extra = {"npudure_backend": "rknn", "npudure_lab": False, "npudure_agent_model_src": str(model)}
        done = _playbook(fleet, "-e", json.dumps(extra), timeout=300)
    finally:
        _put_runtime(fleet, "boards", None)
    flat = _assert_stopped_early(
        done,
        "board2: librknnrt.so is version 1.6.0 but the fleet runs 2.3.2",
        "Fix: install the 2.3.2 librknnrt.so on board2",
    )
    assert "board1: librknnrt.so is version" not in flat and "board3: librknnrt.so is version" not in flat


def test_missing_runtime_library_stops_the_run(fleet: Path, tmp_path: Path) -> None:
    model = tmp_path / "yolov8n.rknn"
    model.write_bytes(b"RKNN fake model")
    _put_runtime(fleet, "boards", None)
    extra = {"npudure_backend": "rknn", "npudure_lab": False, "npudure_agent_model_src": str(model)}
    done = _playbook(fleet, "-e", json.dumps(extra), timeout=300)
    _assert_stopped_early(
        done,
        "board1: /usr/lib/librknnrt.so: no such file. The rknn backend needs Rockchip's runtime there",
        "Fix: set npudure_rknn_runtime_src to librknnrt.so on the controller",
    )


# ---------------------------------------------------------------- the good path (runs after the bad input)


def test_molecule_converge_idempotence_verify(fleet: Path, source: Path) -> None:
    # Arguments after `--` go to every ansible-playbook run of the scenario.
    extra = f"npudure_wheelhouse_project_dir={source}"
    # Destroy comes last, in its own test: the check-mode run below needs the converged fleet.
    done = ansible.run(
        [BIN / "molecule", "test", "--destroy", "never", "--", "-e", extra, "-e", ALL_AT_ONCE],
        timeout=2000,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-8000:]
    for step in ("converge", "idempotence", "verify"):
        assert re.search(rf"{step}\W+Executed: Successful", output), f"molecule {step} did not succeed"
    # The molecule verify play read CPUAffinity and the IRQ masks back inside each board.
    assert "Assert the agent runs on the big cores and the NPU IRQs go to the little ones" in output


def _board(inventory: Path, module: str, args: str, timeout: float = 120) -> str:
    argv = [BIN / "ansible", "-i", inventory, "board1", "-m", module, "-a", args]
    done = ansible.run(argv, timeout=timeout)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_systemd_ends_an_agent_whose_event_loop_is_wedged(fleet: Path) -> None:
    # Real systemd in a board: the installed agent as a transient Type=notify service whose loop is
    # wedged 3 s after start (tests/helpers/wedge_loop.py); WatchdogSec=2 must end it as "watchdog".
    unit = f"npudure-wedge-{secrets.token_hex(3)}"
    venv_python = "/opt/npudure/venv/bin/python"
    config = "node_name: wedge\nlisten: 127.0.0.1:50998\nmetrics_port: 0\n"
    _board(fleet, "copy", json.dumps({"src": str(WEDGE), "dest": "/tmp/npudure-wedge.py"}))
    _board(fleet, "copy", json.dumps({"content": config, "dest": "/tmp/npudure-wedge.yml"}))
    start = (
        f"systemd-run --unit={unit} -p Type=notify -p NotifyAccess=main -p WatchdogSec=2 "
        f"{venv_python} /tmp/npudure-wedge.py 3 agent --config /tmp/npudure-wedge.yml"
    )
    # Until the watchdog fires (or 60 s): the unit's result and what systemd logged about it.
    wait = (
        f"for i in $(seq 60); do r=$(systemctl show -p Result --value {unit}); "
        f'[ "$r" = watchdog ] && break; sleep 1; done; echo "result=$r"; '
        f"journalctl -u {unit} --no-pager -o cat | grep -i watchdog || true"
    )
    try:
        _board(fleet, "command", start)
        out = _board(fleet, "shell", wait, timeout=120)
    finally:
        _board(
            fleet,
            "shell",
            f"systemctl stop {unit}; systemctl reset-failed {unit}; "
            "rm -f /tmp/npudure-wedge.py /tmp/npudure-wedge.yml; true",
        )
    assert "result=watchdog" in out, out
    assert re.search(r"[Ww]atchdog timeout", out), out


def _has_workshop(inventory: Path, host: str) -> bool:
    done = ansible.run(
        [BIN / "ansible", "-i", inventory, host, "-m", "shell", "-a", HAS_WORKSHOP], timeout=120
    )
    assert done.returncode in (0, 2), done.stdout + done.stderr  # 2: the command exited non-zero
    return done.returncode == 0


def test_the_workshop_is_on_the_scheduler_host_and_on_a_board_for_its_sweep_only(
    fleet: Path, source: Path, tmp_path: Path
) -> None:
    """ADR 18: the scheduler host's `controller` extra brings the workshop; a board's venv never holds
    it, and benchmark.yml's context sweep brings it to board1 beside the venv and takes it away."""
    assert _has_workshop(fleet, "sched")
    assert not _has_workshop(fleet, "board1")
    sweep = {
        "npudure_bench_quick": False,
        "npudure_bench_contexts": "1",
        "npudure_bench_contexts_duration_s": 1,
        "npudure_bench_results_dir": str(tmp_path / "results"),
    }
    done = ansible.run(
        [BIN / "ansible-playbook", "-i", fleet, "--limit", "board1", "-e", json.dumps(sweep), BENCHMARK],
        timeout=900,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    assert "TASK [Run the context sweep]" in output and "contexts  path" in output, output[-6000:]
    assert not _has_workshop(fleet, "board1")
    left = _board(fleet, "shell", "ls -d /tmp/*-npudure-workshop 2>/dev/null | wc -l").split()[-1]
    assert left == "0", "the sweep left its workshop folder on the board"


def test_check_mode_on_the_converged_fleet_changes_nothing(fleet: Path, source: Path) -> None:
    done = _playbook(fleet, "--check", "-e", f"npudure_wheelhouse_project_dir={source}", "-e", ALL_AT_ONCE)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    recap = ansible.recap(output)
    hosts = set(yaml.safe_load(fleet.read_text())["all"]["children"]["boards"]["hosts"])
    assert hosts <= set(recap), recap
    assert all(c["changed"] == 0 and c["failed"] == 0 for c in recap.values()), recap


def test_molecule_destroy_removes_only_a_lab_it_booted(fleet: Path) -> None:
    done = ansible.run([BIN / "molecule", "destroy"], timeout=600)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    status = ansible.run([BIN / "npudure", "lab", "status"], timeout=120)
    if "it is left running" in output:
        assert status.returncode == 0, "molecule destroy took down a lab it did not boot"
    else:
        assert "no lab" in status.stdout, "molecule destroy booted the lab but left it running"
