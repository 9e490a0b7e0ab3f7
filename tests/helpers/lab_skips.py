"""When may a lab test skip? Only when this machine truly cannot run it (used by tests/conftest.py).

The lab/fleet/molecule/fault/appliance tests may skip only when this machine truly cannot run them.
As root (or with CI=true) any other skip — a leftover bridge, another lab up, a lab that would not
boot — is a failure: a CI run must not go green without having run them.
"""

from __future__ import annotations

import os

MACHINE_CANNOT = (
    "needs root",
    "missing Debian packages",
    "systemd-nspawn missing",
    "molecule/ansible-core missing",
    "ansible-playbook is not in",
    "the lab is not importable",
    "no v1 cpu hierarchy",
)


def strict_lab_skips() -> bool:
    return os.geteuid() == 0 or os.environ.get("CI", "").lower() in ("1", "true", "yes")


def skip_is_a_failure(is_lab_test: bool, reason: str) -> bool:
    """A lab test is one marked ``lab`` (the marker, not the file name: files move)."""
    return strict_lab_skips() and is_lab_test and not any(fragment in reason for fragment in MACHINE_CANNOT)
