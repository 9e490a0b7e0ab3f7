"""Fixtures of the appliance tests on the emulated fleet (root): the lab and a frozen copy of the sources."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import ansible
from helpers.ansible import BIN, ROOT
from helpers.lab_fleet import SharedLab

LAB_INVENTORY = ROOT / "inventory" / "lab" / "hosts.yml"
# The modules that provision the 3-board lab with site.yml: one lab, booted once per session, serves
# them all (each re-provisions it; on a lab that is up that costs a fraction of booting and the first
# install). They run one after the other, and the lab is taken down after the last of them, so that
# the modules that need no lab up (test_lab_fleet, test_preflight_fleet, ...) find none.
SHARED_LAB_MODULES = ("test_faults_fleet.py", "test_operations_fleet.py")
_SHARED_LAB = SharedLab(3)


def _shares_the_lab(item: pytest.Item) -> bool:
    return item.path.name in SHARED_LAB_MODULES


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The shared-lab modules run back to back, where the first of them was (file order otherwise)."""
    shared = [item for item in items if _shares_the_lab(item)]
    if not shared:
        return
    first = items.index(shared[0])
    rest = [item for item in items if not _shares_the_lab(item)]
    items[:] = rest[:first] + shared + rest[first:]


@pytest.fixture(scope="module")
def shared_lab(request: pytest.FixtureRequest) -> Iterator:
    """The 3-board lab the SHARED_LAB_MODULES share: up at the first one's start, down (if booted
    here) at the last one's end, or at the session's end when a run stops early."""
    request.session.config.add_cleanup(_SHARED_LAB.close)
    yield _SHARED_LAB.get()
    items = request.session.items
    here = request.module.__file__
    last = max(i for i, item in enumerate(items) if str(item.path) == here)
    if not any(_shares_the_lab(item) for item in items[last + 1 :]):
        _SHARED_LAB.close()


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
