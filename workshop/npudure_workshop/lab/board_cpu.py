"""An emulated board's CPU budget like a real board's: a PROJECTION, not a measurement.

Every emulated board shares this host's fast cores, so the agent's own CPU cost hides: a Python agent
that would cap a real board below its NPU looks free here. With a profile, the lab caps each board's
cgroup (cpu.max / cfs quota) at what the board's big cores are worth in this host's cores, divided by
the time scale (a board 10x slowed needs a tenth of the CPU per second).

The worth of a big core is docs/board-cpu.md's projection from published single-thread ratios, at its
pessimistic end: a Cortex-A72 at 2.2 GHz (RK3576) is 2.5-3.1x slower than a core of this project's
host, so 3.1; a Cortex-A76 at 2.4 GHz (RK3588) 1.3-2.1x, so 2.1. Only the four big cores count: the
agent's NPU work is pinned there (CPUAffinity=), and the little cores take the interrupts.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Profile:
    name: str
    says: str  # what it stands for, for logs and `lab status`
    big_cores: int
    slowdown: float  # a big core's time for this host core's second of work (pessimistic end)

    def budget(self, time_scale: float) -> float:
        """Host CPUs the board may use at this time scale."""
        return self.big_cores / self.slowdown / time_scale


PROFILES: dict[str, Profile] = {
    "a72": Profile("a72", "RK3576: 4 x Cortex-A72 at 2.2 GHz, each 3.1x slower than a host core", 4, 3.1),
    "a76": Profile("a76", "RK3588: 4 x Cortex-A76 at 2.4 GHz, each 2.1x slower than a host core", 4, 2.1),
}
HOST = "host"  # no budget: the board takes what this host gives
CHOICES = (HOST, *PROFILES)


def budget(profile: str | None, time_scale: float) -> float | None:
    """The board's CPU quota (host CPUs) for a profile name, None for ``host`` (no cap)."""
    if profile in (None, HOST):
        return None
    return PROFILES[profile].budget(time_scale)


def describe(profile: str | None, time_scale: float) -> str:
    """One line for logs: what the budget is and that it is a projection."""
    cap = budget(profile, time_scale)
    if cap is None:
        return "board CPU: this host's, uncapped (the agent's CPU cost does not show)"
    return (
        f"board CPU: {PROFILES[str(profile)].says} / time scale {time_scale:g} = {cap:.3f} host CPU per "
        "board (a PROJECTION from docs/board-cpu.md, not a measurement)"
    )
