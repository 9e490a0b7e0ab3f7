"""Scaling: 1..N boards chosen with SetActiveNodes (no redeploy), at the operating point.

Total concurrency is the per-board operating point × n, so each board sees the same load at every n.
Efficiency = X(n) / (n · X(1)); it is always reported next to throughput, with the conditions: the
reference's tuned transport raised throughput 13% while efficiency FELL from 98.9% to 95.3% — either
figure alone hides the trade-off. Node counts alternate forward/reverse between repetitions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from npudure.bench.stats import alternating_order

if TYPE_CHECKING:
    from npudure.bench.session import BenchSession


def run_scaling(
    session: BenchSession, per_board: int, repetitions: int = 3, boards_max: int | None = None
) -> dict[str, Any]:
    from npudure.bench.session import RunSpec

    boards = session.boards[: boards_max or len(session.boards)]
    if not boards:
        raise ValueError("no boards to scale over")
    counts = list(range(1, len(boards) + 1))
    series = session.series_name("scaling")
    session.progress.experiment(
        f"{series} (1..{len(boards)} boards at {per_board}/board)", len(counts) * repetitions
    )
    for rep in range(repetitions):
        for n in alternating_order(counts, rep):
            session.execute(
                RunSpec(
                    run_id=f"{series}-n{n}-r{rep}",
                    series=series,
                    experiment="scaling",
                    sequence=session.next_sequence(),
                    repetition=rep,
                    boards=tuple(boards[:n]),
                    concurrency=per_board * n,
                    per_board_concurrency=per_board,
                )
            )
    agg = session.aggregate(series)
    for warning in agg["warnings"]:
        session.progress.note(f"warning: {warning}")
    return agg
