"""Preflight on a fleet that grows and has a dead board, with real Ansible and no boards: the board
comparison (roles/npudure_agent/tasks/compare_facts.yml) fed made-up facts on local hosts, and the
reachability plays of playbooks/preflight.yml on the lab with a board that does not exist (root)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from npudure_workshop.faults.fleet import ansible_env

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

pytestmark = pytest.mark.skipif(
    not (BIN / "ansible-playbook").exists(), reason="ansible-core is not installed"
)

FACTS = {
    "python": "3.11.2",
    "python_ok": True,
    "kernel": "6.1.0",
    "soc": "rk3588",
    "npu_cores": 3,
    "npu_driver": "0.9.8",
    "librknnrt": "2.3.2",
    "rknn_toolkit_lite2": "2.3.2",
    "cpu_governors": "policy0=schedutil",
    "npu_clock": "1000 MHz (rknpu_ondemand)",
    "installed": True,
}
NEW = {**FACTS, "librknnrt": "-", "rknn_toolkit_lite2": "-", "installed": False}


def compare(
    tmp_path: Path, boards: dict[str, dict], extra: dict | None = None
) -> subprocess.CompletedProcess:
    inventory = {
        "all": {
            "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
            "children": {"boards": {"hosts": {name: {"facts": facts} for name, facts in boards.items()}}},
        }
    }
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    play = [
        {
            "name": "Compare",
            "hosts": "boards",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "Fake the facts",
                    "ansible.builtin.set_fact": {"__npudure_board_facts": "{{ facts }}"},
                },
                {
                    "name": "Compare the boards",
                    "ansible.builtin.include_role": {
                        "name": "npudure_agent",
                        "tasks_from": "compare_facts.yml",
                    },
                },
            ],
        }
    ]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    argv = [str(BIN / "ansible-playbook"), "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml")]
    if extra:
        argv += ["-e", json.dumps(extra)]
    env = ansible_env(ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"), ANSIBLE_ROLES_PATH=str(ROOT / "roles"))
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_a_new_board_joins_an_rknn_fleet(tmp_path: Path) -> None:
    done = compare(tmp_path, {"board1": FACTS, "board2": FACTS, "board4": NEW})
    assert done.returncode == 0, done.stdout[-3000:]
    assert "3 boards agree" in done.stdout


def test_installed_boards_that_differ_still_fail(tmp_path: Path) -> None:
    done = compare(
        tmp_path, {"board1": FACTS, "board2": {**FACTS, "rknn_toolkit_lite2": "2.5.0"}, "board4": NEW}
    )
    assert done.returncode == 2
    assert "the boards differ in rknn-toolkit-lite2 version: 2.3.2 / 2.5.0" in done.stdout


def test_a_new_board_with_another_hardware_or_runtime_is_refused(tmp_path: Path) -> None:
    done = compare(tmp_path, {"board1": FACTS, "board4": {**NEW, "soc": "rk3576", "npu_cores": 2}})
    assert done.returncode == 2 and "the boards differ in SoC: rk3588 / rk3576" in done.stdout
    done = compare(
        tmp_path,
        {"board1": FACTS, "board4": {**NEW, "librknnrt": "2.1.0"}},
        {"npudure_rknn_runtime_version": "2.3.2"},
    )
    assert done.returncode == 2
    assert (
        "board4 (joining) has librknnrt 2.1.0, the fleet's target (npudure_rknn_runtime_version) is 2.3.2"
        in (done.stdout)
    )


@pytest.fixture(scope="module")
def lab_inventory(shared_lab) -> Path:
    # The session's lab (tests/appliance/conftest.py): preflight installs nothing, a lab that is up is enough.
    assert shared_lab.inventory_path is not None
    return shared_lab.inventory_path


@pytest.mark.lab
@pytest.mark.timeout(900)
def test_a_dead_board_is_named_and_left_out_when_allowed(lab_inventory: Path, tmp_path: Path) -> None:
    inventory = yaml.safe_load(lab_inventory.read_text())
    # Inside the lab's bridge subnet, and nobody has it.
    inventory["all"]["children"]["boards"]["hosts"]["board9"] = {"ansible_host": "10.231.0.99"}
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(inventory))

    def preflight(*extra: str) -> tuple[int, str]:
        argv = [
            str(BIN / "ansible-playbook"),
            "-i",
            str(path),
            "-e",
            "npudure_preflight_connect_timeout_s=6",
            *extra,
        ]
        done = subprocess.run(
            [*argv, str(ROOT / "playbooks" / "preflight.yml")],
            cwd=ROOT,
            env=ansible_env(ANSIBLE_FORCE_COLOR="0", NO_COLOR="1"),
            capture_output=True,
            text=True,
            timeout=600,
        )
        return done.returncode, " ".join((done.stdout + done.stderr).split())

    rc, out = preflight()
    assert rc == 2 and "board9 (10.231.0.99) cannot be reached over SSH" in out, out[-3000:]
    assert "-e npudure_preflight_max_unreachable=1; unreachable boards: board9" in out
    assert "Compare the boards" not in out
    rc, out = preflight("-e", "npudure_preflight_max_unreachable=1")
    # Ansible's rc for unreachable hosts: the run says so, it never skips the board silently.
    assert rc == 4, out[-3000:]
    assert "WARNING: 1 board(s) unreachable and left out of this run" in out and "board9" in out
    assert "3 boards agree" in out
    assert re.search(r"board9\s*: ok=\d+\s+changed=0\s+unreachable=1", out), out[-2000:]
