"""Fixtures of the appliance tests on the emulated fleet (root): the lab and a frozen copy of the sources."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import ansible
from helpers.ansible import BIN, ROOT

LAB_INVENTORY = ROOT / "inventory" / "lab" / "hosts.yml"


@pytest.fixture(scope="module")
def fleet() -> Iterator[Path]:
    """The 3-board lab: a healthy running one is used and left up, else booted here and removed."""
    reason = ansible.lab_skip_reason()
    if reason:
        pytest.skip(reason)
    from npudure.lab import network

    status = ansible.run([BIN / "npudure", "lab", "status"], timeout=120)
    owned = False
    if status.returncode == 0 and LAB_INVENTORY.is_file():
        pass  # someone's lab, healthy: use it, leave it running
    elif network.link_exists(network.BRIDGE):
        pytest.skip(f"another lab is up without inventory/lab/hosts.yml ({network.BRIDGE} exists)")
    else:
        up = ansible.run([BIN / "npudure", "lab", "up", "--boards", "3"], timeout=900)
        if up.returncode != 0:
            pytest.fail(f"npudure lab up failed:\n{up.stdout}\n{up.stderr}")
        owned = True
    try:
        yield LAB_INVENTORY
    finally:
        if owned:
            ansible.run([BIN / "npudure", "lab", "down"], timeout=300)


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A frozen copy of the package sources for the wheelhouse.

    The wheelhouse rebuilds the npudure wheel whenever the sources change, and the idempotence step
    would then rightly report changes if someone edits the tree during the test.
    """
    snapshot = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (ROOT / name).is_file():
            shutil.copy2(ROOT / name, snapshot / name)
    shutil.copytree(ROOT / "npudure", snapshot / "npudure", ignore=shutil.ignore_patterns("__pycache__"))
    return snapshot
