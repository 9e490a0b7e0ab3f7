"""The provisioned 3-board emulated fleet for lab tests (helper module, not a test module).

A lab that is already up with the same shape is reused and left running, so the lab test files share
one lab; otherwise one is booted here and taken down when the caller's context ends. ``SharedLab``
keeps one booted lab across the test modules of a session (tests/appliance/conftest.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import pytest


@contextmanager
def running_lab(boards: int = 3) -> Iterator:
    """(the lab, up and not provisioned; whether it was booted here and is taken down at the end)."""
    from npudure_workshop.faults import fleet as fleetmod
    from npudure_workshop.lab import Lab, network

    reason = fleetmod.unavailable_reason()
    if reason:
        pytest.skip(reason)
    if not Lab().is_up and network.link_exists(network.BRIDGE):
        pytest.skip(f"another lab is up ({network.BRIDGE} exists) with a different state dir")
    try:
        lab, owned = fleetmod.ensure_lab(boards)
    except fleetmod.FaultsError as exc:  # a lab of another shape is up, or it cannot boot here
        pytest.skip(str(exc))
    try:
        yield lab, owned
    finally:
        if owned:
            lab.down(log=lambda _m: None)


class SharedLab:
    """One lab for several test modules: up (reused or booted) at the first ``get``, and taken down by
    ``close`` if it was booted here, so the second module only re-provisions it."""

    def __init__(self, boards: int = 3) -> None:
        self.boards = boards
        self._lab = None
        self._stack: ExitStack | None = None
        self.owned = False  # booted by this session (and so taken down by close)

    def get(self):
        if self._lab is None:
            stack = ExitStack()
            self._lab, self.owned = stack.enter_context(running_lab(self.boards))  # skips if it cannot run
            self._stack = stack
        return self._lab

    def close(self) -> None:
        stack, self._stack, self._lab = self._stack, None, None
        if stack is not None:
            stack.close()


@contextmanager
def provisioned(lab) -> Iterator:
    """``lab`` (up) provisioned with site.yml (the fault suite's settings), seen through its scheduler."""
    from npudure_workshop.faults import fleet as fleetmod

    with _fleet(lab, fleetmod) as fl:
        yield fl


@contextmanager
def _fleet(lab, fleetmod) -> Iterator:
    fl = None
    try:
        assert lab.inventory_path is not None
        fleetmod.provision(lab.inventory_path, fleetmod.DEFAULT_OVERRIDES)
        fl = fleetmod.Fleet(lab)
        ok, states = fl.wait_all_up(90)
        assert ok, f"boards not UP after provisioning: {states}"
        yield fl
    finally:
        if fl is not None:
            fl.close()
