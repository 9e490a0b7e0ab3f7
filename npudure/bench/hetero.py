"""The heterogeneity dial: cap one board's CPU clock down a ladder and measure per-board latency spread.

Heat does not reproduce heterogeneity (three boards throttling together show none; the reference saw
1.10x to 2.40x spread at the same 86 °C); the clock cap does, deterministically — 816 MHz reproduced
its fanless S0-A run within 6 ms. For each policy the ladder starts with no cap (the baseline), then
each rung; spread = slowest board's mean (and p50) latency / the fastest's. The cap and the policy are
restored on exit, whatever happens (the session's ClusterGuard).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from npudure.bench.stats import alternating_order

if TYPE_CHECKING:
    from npudure.bench.session import BenchSession

REFERENCE_LADDER_MHZ = (2208, 1608, 1200, 1008, 816, 600)
DEFAULT_POLICIES = ("round_robin", "least_inflight", "ect")


def run_hetero(
    session: BenchSession,
    per_board: int,
    ladder: list[int],
    policies: list[str],
    board: str | None = None,
    repetitions: int = 1,
) -> dict[str, Any]:
    from npudure.bench.session import RunSpec

    boards = tuple(session.boards)
    if len(boards) < 2:
        raise ValueError("the heterogeneity dial needs at least 2 boards (a spread is between boards)")
    victim = board or boards[0]
    if victim not in boards:
        raise ValueError(f"--hetero-board {victim!r} is not an active board; boards are: {', '.join(boards)}")
    rungs = [0, *[int(m) for m in ladder if int(m) > 0]]  # 0 = no cap: the baseline
    series = session.series_name("hetero")
    session.progress.experiment(
        f"{series} (cap {victim}: {rungs[1:]} MHz; policies {policies})",
        len(rungs) * len(policies) * repetitions,
    )
    for rep in range(repetitions):
        for policy in alternating_order(policies, rep):
            for mhz in alternating_order(rungs, rep):
                session.execute(
                    RunSpec(
                        run_id=f"{series}-{policy}-cap{mhz}-r{rep}",
                        series=series,
                        experiment="hetero",
                        sequence=session.next_sequence(),
                        repetition=rep,
                        boards=boards,
                        concurrency=per_board * len(boards),
                        per_board_concurrency=per_board,
                        policy=policy,
                        caps={victim: mhz},
                        cap_board=victim,
                    )
                )
    return session.aggregate(series)
