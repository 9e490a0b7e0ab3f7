"""rotate-ca.yml without boards: its controller play on a local inventory (phases refused out of order
with one line, a re-run changed=0), and the tls role's view of the controller's rotation state (the trust
file it deploys, the CA that signs, the issuer check). Needs ansible-core (in .venv); no root, no lab."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers.ansible import BIN, ROOT, local_env

from npudure.security import ca_rotation, pki

pytestmark = pytest.mark.skipif(
    not (BIN / "ansible-playbook").exists(), reason="ansible-core is not installed (pip install -e '.[dev]')"
)


def _env() -> dict[str, str]:
    # The controller's `npudure` must be this tree's (the one with `pki rotate-ca`).
    return {
        **local_env(),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }


def _playbook(tmp_path: Path, plays: list, name: str, phase: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(plays, sort_keys=False))
    return subprocess.run(
        [BIN / "ansible-playbook", "-i", tmp_path / "hosts.yml", path, "-e", f"npudure_ca_rotation={phase}"],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def controller_ca(tmp_path: Path) -> Path:
    ca_dir = tmp_path / "pki"
    pki.make_ca(ca_dir)
    host = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "npudure_tls_enabled": True,
        "npudure_tls_ca_dir": str(ca_dir),
        "npudure_tls_controller_cli": str(BIN / "npudure"),
    }
    inventory = {"all": {"children": {"scheduler": {"hosts": {"sched": host}}}}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    return ca_dir


def _recap(out: str) -> tuple[int, int]:
    """(changed, failed) of localhost in the PLAY RECAP."""
    line = next(line for line in out.splitlines() if line.startswith("localhost") and "changed=" in line)
    fields = dict(part.split("=") for part in line.split(":", 1)[1].split())
    return int(fields["changed"]), int(fields["failed"])


def test_the_controller_play_walks_the_phases_in_order_only(tmp_path: Path, controller_ca: Path) -> None:
    # The playbook's own first play; the roll it imports (site.yml) needs hosts and is left out.
    plays = yaml.safe_load((ROOT / "playbooks" / "rotate-ca.yml").read_text())[:1]
    steps = [
        ("switch", (0, 1), "no CA rotation is under way: start one first"),
        ("start", (1, 0), None),
        ("start", (0, 0), None),
        ("finish", (0, 1), "not switched to the new CA yet: switch first"),
        ("switch", (1, 0), None),
        ("start", (0, 1), "past its start (the certificates are switched): finish it"),
        ("finish", (1, 0), None),
        ("finish", (0, 0), None),
    ]
    for phase, recap, refusal in steps:
        done = _playbook(tmp_path, plays, "controller.yml", phase)
        assert _recap(done.stdout) == recap, (phase, done.stdout[-2000:])
        if refusal:
            msg = next(line for line in done.stdout.splitlines() if '"msg"' in line or "msg:" in line)
            assert refusal in msg and "Traceback" not in done.stdout, msg
    assert ca_rotation.current_phase(controller_ca) is None
    assert len(list((controller_ca / "retired").iterdir())) == 1


def test_the_tls_role_follows_the_rotation_on_the_controller(tmp_path: Path, controller_ca: Path) -> None:
    plays = [
        {
            "name": "The role's view",
            "hosts": "sched",
            "gather_facts": False,
            "vars_files": [str(ROOT / "roles" / "npudure_tls" / "vars" / "main.yml")],
            "tasks": [
                {
                    "ansible.builtin.copy": {
                        "content": "{{ _npudure_tls_trust }} {{ _npudure_tls_signing_ca_dir }} "
                        "{{ _npudure_tls_issuer }}",
                        "dest": str(tmp_path / "view.txt"),
                        "mode": "0600",
                    }
                }
            ],
        }
    ]
    views = []
    for phase in (None, *ca_rotation.PHASES):
        if phase:
            ca_rotation.advance(controller_ca, phase)
        done = _playbook(tmp_path, plays, "view.yml", "start")
        assert done.returncode == 0, done.stdout[-2000:]
        views.append((tmp_path / "view.txt").read_text().strip())
    d = str(controller_ca)
    assert views == [
        f"{d}/ca.crt {d} any",
        f"{d}/trust.crt {d} any",  # start: the bundle; the old CA signs; either passes
        f"{d}/trust.crt {d}/next first",  # switch: the new CA signs; only its certificates pass
        f"{d}/ca.crt {d} any",  # finish: the new CA is ca.crt
    ]
