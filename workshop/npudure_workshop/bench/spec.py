"""What one run asks for. Experiments plan lists of these; the session executes them.

It lives apart from both so that neither the experiments nor the session import each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RunSpec:
    run_id: str
    series: str
    experiment: str  # an experiment kind from npudure_workshop.bench.experiments (sweep, scaling, ...)
    sequence: int
    repetition: int
    boards: tuple[str, ...]
    mode: str = "closed"  # closed | open
    concurrency: int | None = None  # total requests outstanding (closed loop)
    per_board_concurrency: int | None = None
    rate: float | None = None  # open loop, requests per second
    arrival: str | None = None  # constant | poisson
    seed: int = 0
    policy: str | None = None  # set before the run (None = leave as is)
    caps: dict[str, int] = field(default_factory=dict)  # board -> MHz (0 = no cap), set before the run
    cap_board: str | None = None
    # How the load reaches the boards: "scheduler" (central), "proxyless" (the client balances over
    # the scheduler's route, frames go straight to the boards) or "agent" (one board, no scheduler).
    via: str = "scheduler"
    # Boards whose reboot or absence during this run is planned (a fault suite's): noted, not invalid.
    expect_reboot: tuple[str, ...] = ()


VIAS = ("scheduler", "proxyless", "agent")
