"""The faults: how each is injected into the emulated fleet, lifted, and restored whatever happens.

A *held* fault stays until the suite lifts it (link back up, hang cleared, cap removed); the others
heal by themselves (systemd restarts the agent, the board boots again, the scheduler restarts) and
recovery is timed from the injection. ``restore`` is idempotent and always runs, in a ``finally``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from npudure.proto import inference_pb2 as pb
from npudure_workshop.faults.fleet import SCHEDULER_HOST, Fleet

AGENT_UNIT = "npudure-agent"
SCHEDULER_UNIT = "npudure-scheduler"
# "slow": the reference's 816 MHz rung (sim: 2.26x service time) and a quarter of a host CPU.
SLOW_CAP_MHZ = 816
SLOW_CPU_QUOTA = 0.25

Action = Callable[[Fleet, str], None]


@dataclass(frozen=True)
class FaultSpec:
    name: str
    what: str
    on_scheduler: bool  # the fault hits the scheduler host, not a board
    held: bool  # lifted by the suite after the hold time (else it heals by itself)
    excludes: bool  # the scheduler is expected to take the board out of rotation
    inject: Action
    lift: Action | None
    restore: Action
    recovery_budget_s: float  # how long after the lift (or the injection) recovery may take


def _ensure_active(fleet: Fleet, host: str, unit: str) -> None:
    state = fleet.lab.exec(host, ["systemctl", "is-active", unit], timeout=15).stdout.strip()
    if state not in ("active", "activating", "reloading"):
        fleet.lab.exec(host, f"systemctl reset-failed {unit}; systemctl start {unit}", timeout=90, check=True)


def _kill_agent(fleet: Fleet, board: str) -> None:
    fleet.lab.exec(board, ["systemctl", "kill", "-s", "KILL", AGENT_UNIT], timeout=15, check=True)


def _reboot(fleet: Fleet, board: str) -> None:
    fleet.lab.reboot(board, timeout=120)


def _link_down(fleet: Fleet, board: str) -> None:
    fleet.lab.set_link(board, False)


def _link_up(fleet: Fleet, board: str) -> None:
    fleet.lab.set_link(board, True)


def _slow(fleet: Fleet, board: str) -> None:
    fleet.set_cpu_cap(board, SLOW_CAP_MHZ)
    fleet.lab.set_cpu_quota(board, SLOW_CPU_QUOTA)


def _unslow(fleet: Fleet, board: str) -> None:
    # Both halves are undone even when one fails; the first failure is raised afterwards.
    errors: list[Exception] = []
    try:
        fleet.lab.set_cpu_quota(board, None)
    except Exception as exc:
        errors.append(exc)
    try:
        fleet.set_cpu_cap(board, 0)
    except Exception as exc:
        errors.append(exc)
    if errors:
        raise errors[0]


def _hang(fleet: Fleet, board: str) -> None:
    fleet.inject(board, pb.FAULT_HANG)


def _unhang(fleet: Fleet, board: str, timeout: float = 20.0) -> None:
    """FAULT_NONE, retried while the agent is unreachable (a hung board may answer slowly)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            fleet.inject(board, pb.FAULT_NONE)
            return
        except grpc.RpcError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _restart_scheduler(fleet: Fleet, _host: str) -> None:
    fleet.lab.exec(SCHEDULER_HOST, ["systemctl", "restart", SCHEDULER_UNIT], timeout=60, check=True)


def _agent_running(fleet: Fleet, board: str) -> None:
    _ensure_active(fleet, board, AGENT_UNIT)


def _scheduler_running(fleet: Fleet, _host: str) -> None:
    _ensure_active(fleet, SCHEDULER_HOST, SCHEDULER_UNIT)


def _heals(name: str, what: str, inject: Action, budget_s: float, on_scheduler: bool = False) -> FaultSpec:
    """A fault systemd heals (the unit restarts, the board boots): nothing to lift, and restoring is
    making sure the unit runs. A board's fault takes it out of rotation; the scheduler's takes none out."""
    restore = _scheduler_running if on_scheduler else _agent_running
    return FaultSpec(
        name,
        what,
        on_scheduler,
        held=False,
        excludes=not on_scheduler,
        inject=inject,
        lift=None,
        restore=restore,
        recovery_budget_s=budget_s,
    )


def _held(
    name: str, what: str, inject: Action, lift: Action, budget_s: float, excludes: bool = True
) -> FaultSpec:
    """A board fault the suite lifts after the hold; the lift is idempotent, so it is the restore too."""
    return FaultSpec(
        name,
        what,
        on_scheduler=False,
        held=True,
        excludes=excludes,
        inject=inject,
        lift=lift,
        restore=lift,
        recovery_budget_s=budget_s,
    )


FAULTS: dict[str, FaultSpec] = {
    f.name: f
    for f in (
        _heals(
            "agent-kill",
            "systemctl kill -s KILL npudure-agent on the board; systemd restarts it (RestartSec=2)",
            _kill_agent,
            20.0,
        ),
        _heals(
            "board-reboot",
            "systemctl reboot inside the board (Lab.reboot); the agent starts at boot",
            _reboot,
            25.0,
        ),
        _held(
            "link-cut",
            "the board's eth0 down (Lab.set_link: a cable pull), then up again",
            _link_down,
            _link_up,
            25.0,
        ),
        _held(
            "slow",
            f"sim CPU cap {SLOW_CAP_MHZ} MHz (SetNodeCpuCap) and {SLOW_CPU_QUOTA} CPU (Lab.set_cpu_quota)",
            _slow,
            _unslow,
            6.0,
            excludes=False,
        ),
        _held(
            "npu-hang",
            "Node.InjectFault FAULT_HANG on the board's agent, then FAULT_NONE",
            _hang,
            _unhang,
            15.0,
        ),
        _heals(
            "scheduler-restart",
            "systemctl restart npudure-scheduler on the scheduler host mid-load",
            _restart_scheduler,
            25.0,
            on_scheduler=True,
        ),
    )
}


def parse_faults(text: str) -> list[FaultSpec]:
    """``all`` or a comma-separated list of fault names, in the order given."""
    names = list(FAULTS) if text.strip() == "all" else [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in FAULTS]
    if unknown or not names:
        raise ValueError(
            f"unknown fault {', '.join(unknown) or '(none given)'}; "
            f"choose 'all' or some of: {', '.join(FAULTS)}"
        )
    return [FAULTS[n] for n in dict.fromkeys(names)]


def restore_quietly(spec: FaultSpec, fleet: Fleet, board: str) -> str:
    """Run ``spec.restore``; return "" or what went wrong (the suite reports it and carries on)."""
    try:
        spec.restore(fleet, board)
    except Exception as exc:
        return f"restoring after {spec.name} on {board} failed: {exc}"
    return ""


__all__ = ["FAULTS", "FaultSpec", "parse_faults", "restore_quietly"]
