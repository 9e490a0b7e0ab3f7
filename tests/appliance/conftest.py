"""Fixtures of the appliance tests on the emulated fleet (root): the lab and a frozen copy of the sources."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import ansible
from helpers.lab_fleet import SharedLab

from npudure_workshop.faults.fleet import frozen_source

# The modules that need the 3-board lab up: one lab, booted once per session, serves them all (each
# provisions it as it needs; on a lab that is up that costs a fraction of booting and the first
# install). They run back to back in this order, and the lab is taken down after the last of them, so
# that the modules that need no lab up (test_lab_fleet, ...) find none. The TLS module comes last: it
# switches the fleet to mTLS, which a one-board-at-a-time roll back to plaintext could not cross.
SHARED_LAB_MODULES = (
    "test_faults_fleet.py",
    "test_operations_fleet.py",
    "test_preflight_fleet.py",
    "test_site.py",
    "test_site_tls.py",
)
_SHARED_LAB = SharedLab(3)


def _shares_the_lab(item: pytest.Item) -> bool:
    return item.path.name in SHARED_LAB_MODULES


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The shared-lab modules run back to back, in SHARED_LAB_MODULES order, where the first of them was."""
    shared = [item for item in items if _shares_the_lab(item)]
    if not shared:
        return
    first = items.index(shared[0])
    rest = [item for item in items if not _shares_the_lab(item)]
    shared.sort(key=lambda item: SHARED_LAB_MODULES.index(item.path.name))  # stable: file order within
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
def lab_is_kept(shared_lab) -> bool:
    """Whether the lab outlives this session (it was up before: someone's own lab, left running)."""
    return not _SHARED_LAB.owned


@pytest.fixture(scope="module")
def fleet(request: pytest.FixtureRequest) -> Path:
    """The shared 3-board lab's inventory (inventory/lab/hosts.yml), for modules that run the playbooks."""
    reason = ansible.lab_skip_reason()
    if reason:
        pytest.skip(reason)
    lab = request.getfixturevalue("shared_lab")
    assert lab.inventory_path is not None, "the lab is up without an inventory"
    return lab.inventory_path


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A frozen copy of the package sources for the wheelhouse.

    The wheelhouse rebuilds the npudure wheel whenever the sources change, and the idempotence step
    would then rightly report changes if someone edits the tree during the test.
    """
    return frozen_source(tmp_path_factory.mktemp("source"))
