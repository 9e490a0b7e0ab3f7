"""The Ansible side of the converter, on this machine (no lab, no root): site.yml's controller step
converts for rknn boards that name no model, and the runtime role's preflight compares the model's
recorded toolkit version with the board's librknnrt (a local-connection "board" with a fake library).

Uses the converted models from the cache of tests/integration/test_rknn_convert.py when present (else
converts: ~1 min).
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(1500),
    pytest.mark.skipif(
        sys.platform != "linux" or platform.machine() != "x86_64", reason="rknn-toolkit2 runs on x86_64 Linux"
    ),
    pytest.mark.skipif(not (BIN / "ansible-playbook").exists(), reason="ansible-core missing"),
]

PLAY = """
- name: Convert, then the runtime preflight
  hosts: boards
  gather_facts: false
  tasks:
    - name: Convert
      ansible.builtin.include_role:
        name: npudure_rknn_runtime
        tasks_from: convert.yml
    - name: Show the model
      ansible.builtin.debug:
        msg: "MODEL={{ npudure_agent_model_src | default('-') }}"
    - name: Preflight
      ansible.builtin.include_role:
        name: npudure_rknn_runtime
        tasks_from: preflight.yml
      vars:
        npudure_rknn_runtime_enabled: true
"""


def _run(tmp_path: Path, hosts: dict) -> subprocess.CompletedProcess[str]:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {"boards": {"hosts": hosts}}}}))
    play = tmp_path / "play.yml"
    play.write_text(PLAY)
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_ROLES_PATH": str(ROOT / "roles"),
        "ANSIBLE_NOCOLOR": "1",
    }
    return subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(inventory), str(play)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )


def _board(lib: Path, **extra) -> dict:
    return {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "npudure_agent_backend": "rknn",
        "npudure_rknn_runtime_lib_path": str(lib),
        **extra,
    }


def _fake_lib(path: Path, version: str) -> Path:
    path.write_bytes(b"\x7fELF fake\nlibrknnrt version: " + version.encode() + b" (0123@2025-01-01)\n")
    return path


def test_converts_per_soc_and_refuses_a_runtime_of_another_version(tmp_path: Path) -> None:
    old = _fake_lib(tmp_path / "librknnrt-old.so", "2.3.2")
    done = _run(tmp_path, {"b76": _board(old), "b88": _board(old, npudure_rknn_runtime_platform="rk3588")})
    flat = " ".join(done.stdout.split())
    assert "MODEL=" in flat and "-rk3576.rknn" in flat and "-rk3588.rknn" in flat, flat[-4000:]
    assert done.returncode != 0
    for soc in ("rk3576", "rk3588"):
        assert (
            f"was converted by rknn-toolkit2 2.5.0 for {soc}, but the board's librknnrt.so is 2.3.2" in flat
        ), flat[-4000:]
    assert "Fix: install librknnrt 2.5.0" in flat


def test_matching_runtime_passes_the_version_check(tmp_path: Path) -> None:
    lib = _fake_lib(tmp_path / "librknnrt.so", "2.5.0")
    done = _run(tmp_path, {"b76": _board(lib)})
    flat = " ".join(done.stdout.split())
    assert "was converted by rknn-toolkit2" not in flat
    assert "Assert the model was converted with the board's runtime version" in flat
    # The play goes on to the next check: the NPU device node (this machine has none, or it passes).
    assert "no NPU device node" in flat or done.returncode == 0, flat[-3000:]


def test_a_named_model_is_not_converted(tmp_path: Path) -> None:
    lib = _fake_lib(tmp_path / "librknnrt.so", "2.5.0")
    model = tmp_path / "mine.rknn"
    model.write_bytes(b"RKNN mine")
    done = _run(tmp_path, {"b76": _board(lib, npudure_agent_model_src=str(model))})
    assert f"MODEL={model}" in done.stdout
    assert "Convert the model for the boards that name none" in done.stdout
    convert = done.stdout.split("Convert the model for the boards that name none", 1)[1].split("TASK", 1)[0]
    assert "skipping" in convert and "ok:" not in convert and "changed:" not in convert
