"""Ansible from the tests: environments, a bounded ansible run, the PLAY RECAP, template rendering."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from npudure_workshop.faults.fleet import ansible_env

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def local_env() -> dict[str, str]:
    """For ansible-playbook on local hosts (no boards)."""
    return ansible_env(ANSIBLE_LOCAL_TEMP="/tmp/npudure-ansible-local")


def plain_env() -> dict[str, str]:
    """For runs whose output a test reads: no colour codes."""
    return ansible_env(ANSIBLE_FORCE_COLOR="0", PY_COLORS="0", NO_COLOR="1")


def run(argv: list, timeout: float) -> subprocess.CompletedProcess[str]:
    """Run ARGV from the repository root with :func:`plain_env`; capture its output (bounded)."""
    return subprocess.run(
        [str(a) for a in argv], cwd=ROOT, env=plain_env(), capture_output=True, text=True, timeout=timeout
    )


def lab_skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root (the emulated boards are systemd-nspawn containers): run with sudo"
    if not shutil.which("systemd-nspawn"):
        return "systemd-nspawn missing: apt-get install -y systemd-container debootstrap"
    if not (BIN / "molecule").exists() or not (BIN / "ansible-playbook").exists():
        return "molecule/ansible-core missing: pip install -e '.[dev]'"
    try:
        from npudure_workshop.lab.host import missing_packages
    except ImportError as exc:
        return f"the lab is not importable: {exc}"
    missing = missing_packages()
    return f"missing Debian packages: apt-get install -y {' '.join(missing)}" if missing else None


def recap(output: str) -> dict[str, dict[str, int]]:
    """host -> counters from the PLAY RECAP of an ansible-playbook run."""
    found = {}
    for host, counters in re.findall(r"^(\S+)\s+:\s+(ok=.*)$", output, re.M):
        found[host] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", counters)}
    return found


# Two boards (one with an address) and the scheduler, all local: what the role templates are rendered for.
BOARDS_AND_SCHEDULER = {
    "vars": {"ansible_connection": "local"},
    "children": {
        "boards": {"hosts": {"board1": {"ansible_host": "10.0.0.11"}, "board2": {}}},
        "scheduler": {"hosts": {"sched": {}}},
    },
}


def render(
    tmp_path: Path,
    role: str,
    group: str,
    templates: list[str],
    extra: dict,
    *,
    inventory: dict | None = None,
    per_host: bool = True,
) -> Path:
    """Render ROLE's TEMPLATES for each host of GROUP with ansible-playbook (local hosts): the out folder.

    ``inventory`` is the ``all`` group (default :data:`BOARDS_AND_SCHEDULER`). Each file is named
    ``<host>-<template without .j2>``, or without the host for a group of one host (``per_host=False``).
    """
    out = tmp_path / "out"
    out.mkdir()
    hosts = tmp_path / "hosts.yml"
    hosts.write_text(yaml.safe_dump({"all": BOARDS_AND_SCHEDULER if inventory is None else inventory}))
    playbook = tmp_path / "render.yml"
    templates_dir = ROOT / "roles" / role / "templates"
    name = (
        "{{ inventory_hostname }}-{{ item | splitext | first }}"
        if per_host
        else "{{ item | splitext | first }}"
    )
    play = {
        "hosts": group,
        "gather_facts": False,
        "vars_files": [str(ROOT / "roles" / role / part / "main.yml") for part in ("defaults", "vars")],
        "tasks": [
            {
                "ansible.builtin.template": {
                    "src": f"{templates_dir}/{{{{ item }}}}",
                    "dest": f"{out}/{name}",
                    "mode": "0644",
                },
                "delegate_to": "localhost",
                "loop": templates,
            }
        ],
    }
    playbook.write_text(yaml.safe_dump([play]))
    done = run_local_play(tmp_path, hosts, playbook, extra)
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def run_local_play(
    tmp_path: Path, hosts: Path, playbook: Path, extra: dict
) -> subprocess.CompletedProcess[str]:
    """ansible-playbook on local hosts with the repository's roles; its temp files under ``tmp_path``."""
    env = ansible_env(
        ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"), ANSIBLE_ROLES_PATH=str(ROOT / "roles")
    )
    return subprocess.run(
        # Extra vars outrank the role files loaded as vars_files (as inventory values outrank defaults).
        [BIN / "ansible-playbook", "-i", hosts, "-e", json.dumps(extra), playbook],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
