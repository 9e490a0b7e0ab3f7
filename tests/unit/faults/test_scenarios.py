"""The fault table: what each fault does to the fleet on inject, lift and restore (a recording fake fleet,
no lab), its flags and budgets, and how a list of faults is parsed. The lab runs them for real in
tests/appliance/test_faults_fleet.py."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from npudure.proto import inference_pb2 as pb
from npudure_workshop.faults import scenarios
from npudure_workshop.faults.fleet import SCHEDULER_HOST
from npudure_workshop.faults.scenarios import FAULTS, parse_faults, restore_quietly


@dataclass
class _Done:
    stdout: str = "active\n"


@dataclass
class FakeLab:
    calls: list[tuple] = field(default_factory=list)
    state: str = "active"

    def exec(self, host, command, timeout=None, check=False):
        self.calls.append(("exec", host, command if isinstance(command, str) else tuple(command)))
        return _Done(f"{self.state}\n")

    def reboot(self, board, timeout=None):
        self.calls.append(("reboot", board))

    def set_link(self, board, up):
        self.calls.append(("set_link", board, up))

    def set_cpu_quota(self, board, quota):
        self.calls.append(("set_cpu_quota", board, quota))


@dataclass
class FakeFleet:
    lab: FakeLab = field(default_factory=FakeLab)

    def set_cpu_cap(self, board, mhz):
        self.lab.calls.append(("set_cpu_cap", board, mhz))

    def inject(self, board, fault):
        self.lab.calls.append(("inject", board, fault))


def _calls(action, host: str = "board2", state: str = "active") -> list[tuple]:
    fleet = FakeFleet(FakeLab(state=state))
    action(fleet, host)
    return fleet.lab.calls


AGENT_UP = [("exec", "board2", ("systemctl", "is-active", "npudure-agent"))]
AGENT_STARTED = [
    *AGENT_UP,
    ("exec", "board2", "systemctl reset-failed npudure-agent; systemctl start npudure-agent"),
]
SCHEDULER_UP = [("exec", SCHEDULER_HOST, ("systemctl", "is-active", "npudure-scheduler"))]
LINK_UP = [("set_link", "board2", True)]
UNSLOW = [("set_cpu_quota", "board2", None), ("set_cpu_cap", "board2", 0)]
UNHANG = [("inject", "board2", pb.FAULT_NONE)]

# name: (on_scheduler, held, excludes, budget s, inject calls, lift calls or None, restore calls)
TABLE = {
    "agent-kill": (
        False,
        False,
        True,
        20.0,
        [("exec", "board2", ("systemctl", "kill", "-s", "KILL", "npudure-agent"))],
        None,
        AGENT_UP,
    ),
    "board-reboot": (False, False, True, 25.0, [("reboot", "board2")], None, AGENT_UP),
    "link-cut": (False, True, True, 25.0, [("set_link", "board2", False)], LINK_UP, LINK_UP),
    "slow": (
        False,
        True,
        False,
        6.0,
        [("set_cpu_cap", "board2", 816), ("set_cpu_quota", "board2", 0.25)],
        UNSLOW,
        UNSLOW,
    ),
    "npu-hang": (False, True, True, 15.0, [("inject", "board2", pb.FAULT_HANG)], UNHANG, UNHANG),
    "scheduler-restart": (
        True,
        False,
        False,
        25.0,
        [("exec", SCHEDULER_HOST, ("systemctl", "restart", "npudure-scheduler"))],
        None,
        SCHEDULER_UP,
    ),
}


def test_the_table_names_every_fault_in_the_suite_order() -> None:
    assert list(FAULTS) == list(TABLE)
    assert all(spec.name == name and spec.what for name, spec in FAULTS.items())


@pytest.mark.parametrize("name", list(TABLE))
def test_each_fault_injects_lifts_and_restores_as_documented(name: str) -> None:
    on_scheduler, held, excludes, budget, inject, lift, restore = TABLE[name]
    spec = FAULTS[name]
    assert (spec.on_scheduler, spec.held, spec.excludes, spec.recovery_budget_s) == (
        on_scheduler,
        held,
        excludes,
        budget,
    )
    assert _calls(spec.inject) == inject
    assert (spec.lift is None) == (lift is None)
    if spec.lift is not None:
        assert _calls(spec.lift) == lift
    assert _calls(spec.restore) == restore


def test_a_self_healing_fault_starts_its_unit_again_when_it_did_not_come_back() -> None:
    assert _calls(FAULTS["agent-kill"].restore, state="failed") == AGENT_STARTED
    assert _calls(FAULTS["board-reboot"].restore, state="inactive") == AGENT_STARTED
    assert _calls(FAULTS["scheduler-restart"].restore, state="activating") == SCHEDULER_UP


def test_unslow_undoes_both_halves_and_raises_the_first_failure() -> None:
    class Broken(FakeFleet):
        def set_cpu_cap(self, board, mhz):
            super().set_cpu_cap(board, mhz)
            raise RuntimeError("cap refused")

    fleet = Broken()
    with pytest.raises(RuntimeError, match="cap refused"):
        FAULTS["slow"].restore(fleet, "board2")
    assert fleet.lab.calls == UNSLOW


def test_parse_faults_keeps_the_order_given_and_drops_repeats() -> None:
    assert [s.name for s in parse_faults("all")] == list(TABLE)
    assert [s.name for s in parse_faults(" slow, agent-kill ,slow")] == ["slow", "agent-kill"]
    with pytest.raises(ValueError, match="unknown fault nope; choose 'all' or some of: agent-kill"):
        parse_faults("nope,slow")
    with pytest.raises(ValueError, match=r"unknown fault \(none given\)"):
        parse_faults(" , ")


def test_restore_quietly_reports_a_failure_instead_of_raising() -> None:
    class Down(FakeFleet):
        def inject(self, board, fault):
            raise OSError("no route")

    assert restore_quietly(FAULTS["link-cut"], FakeFleet(), "board2") == ""
    why = restore_quietly(FAULTS["npu-hang"], Down(), "board2")
    assert why == "restoring after npu-hang on board2 failed: no route"


def test_the_slow_rung_is_the_reference_clock() -> None:
    assert (scenarios.SLOW_CAP_MHZ, scenarios.SLOW_CPU_QUOTA) == (816, 0.25)
