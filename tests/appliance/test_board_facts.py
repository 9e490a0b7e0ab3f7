"""Preflight/verify's board facts and their comparison across boards (real ansible-playbook, local hosts)."""

from __future__ import annotations

import glob
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers.ansible import BIN, ROOT, local_env

SCRIPT = ROOT / "roles/npudure_agent/files/board_facts.py"
OLD_PYTHON = sorted(glob.glob("/root/.pyenv/versions/3.[6-9].*/bin/python"))


def fake_board(root: Path, soc: str = "rk3588", driver: str = "0.9.8", governor: str = "schedutil") -> Path:
    sysfs = root / "sys"
    (sysfs / "firmware/devicetree/base").mkdir(parents=True)
    (sysfs / "firmware/devicetree/base/compatible").write_bytes(f"vendor,board\0rockchip,{soc}\0".encode())
    (sysfs / "module/rknpu").mkdir(parents=True)
    (sysfs / "module/rknpu/version").write_text(f"{driver}\n")
    for policy in ("policy0", "policy4"):
        (sysfs / f"devices/system/cpu/cpufreq/{policy}").mkdir(parents=True)
        (sysfs / f"devices/system/cpu/cpufreq/{policy}/scaling_governor").write_text(f"{governor}\n")
    npu = sysfs / "class/devfreq/fdab0000.npu"
    npu.mkdir(parents=True)
    (npu / "cur_freq").write_text("1000000000\n")
    (npu / "governor").write_text("rknpu_ondemand\n")
    return sysfs


def facts(python: str, sysfs: Path) -> dict:
    result = subprocess.run(
        [python, str(SCRIPT), "--sysfs-root", str(sysfs), "--venv", str(sysfs / "no-venv")],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_facts_of_a_fake_rk3588(tmp_path: Path) -> None:
    got = facts(sys.executable, fake_board(tmp_path))
    assert got["soc"] == "rk3588" and got["npu_cores"] == 3
    assert got["npu_driver"] == "0.9.8"
    assert got["cpu_governors"] == "policy0=schedutil policy4=schedutil"
    assert got["npu_clock"] == "1000 MHz (rknpu_ondemand)"
    assert got["rknn_toolkit_lite2"] == "-"
    assert got["python_ok"] is True


@pytest.mark.skipif(not OLD_PYTHON, reason="no Python older than 3.10 under /root/.pyenv/versions")
def test_facts_run_and_flag_an_old_python(tmp_path: Path) -> None:
    got = facts(OLD_PYTHON[0], fake_board(tmp_path))
    assert got["python_ok"] is False and got["python"].startswith("3.")
    assert got["soc"] == "rk3588"


def _compare(tmp_path: Path, boards: dict[str, dict]) -> subprocess.CompletedProcess[str]:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        yaml.safe_dump(
            {"all": {"vars": {"ansible_connection": "local"}, "children": {"boards": {"hosts": boards}}}}
        )
    )
    playbook = tmp_path / "compare.yml"
    tasks = [
        {"name": n, "ansible.builtin.include_role": {"name": "npudure_agent", "tasks_from": f}}
        for n, f in (("Facts", "facts.yml"), ("Compare", "compare_facts.yml"))
    ]
    playbook.write_text(yaml.safe_dump([{"hosts": "boards", "gather_facts": False, "tasks": tasks}]))
    return subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(inventory), str(playbook)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**local_env(), "ANSIBLE_ROLES_PATH": str(ROOT / "roles")},
        cwd=tmp_path,
    )


needs_ansible = pytest.mark.skipif(not (BIN / "ansible-playbook").exists(), reason="no ansible-core")


@needs_ansible
def test_governor_difference_warns_but_passes(tmp_path: Path) -> None:
    boards = {
        f"b{i}": {
            "npudure_agent_sysfs_root": str(fake_board(tmp_path / f"b{i}", governor=gov)),
            "ansible_python_interpreter": sys.executable,
        }
        for i, gov in enumerate(["schedutil", "schedutil", "performance"])
    }
    result = _compare(tmp_path, boards)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "the boards differ in CPU governors" in result.stdout
    assert "3 boards agree" in result.stdout


@needs_ansible
def test_driver_soc_and_old_python_fail_naming_the_board(tmp_path: Path) -> None:
    boards = {
        "b1": {"npudure_agent_sysfs_root": str(fake_board(tmp_path / "b1"))},
        "b2": {"npudure_agent_sysfs_root": str(fake_board(tmp_path / "b2", driver="0.9.6"))},
        "b3": {"npudure_agent_sysfs_root": str(fake_board(tmp_path / "b3", soc="rk3576"))},
    }
    for board in boards.values():
        board["ansible_python_interpreter"] = sys.executable
    if OLD_PYTHON:
        boards["b3"]["ansible_python_interpreter"] = OLD_PYTHON[0]
    result = _compare(tmp_path, boards)
    assert result.returncode != 0
    out = result.stdout
    assert "the boards differ in NPU driver version: 0.9.8 / 0.9.6" in out
    assert "the boards differ in SoC: rk3588 / rk3576" in out
    assert "the boards differ in NPU core count: 3 / 2" in out
    if OLD_PYTHON:
        assert "b3: Python 3." in out and "is older than 3.10" in out
