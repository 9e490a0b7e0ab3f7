"""Concurrency sweep → saturation curve → operating point.

Concurrency is given PER BOARD and multiplied by the number of boards (the reference's "c12 per node").
The operating point is the lowest per-board concurrency reaching 98% of the peak mean throughput;
everything else (scaling, policy comparisons, the CPU-cap ladder) is measured there, never in overload —
the reference once saw a 46% tail penalty flip to an 18.8% gain when it re-measured at the operating
point instead of at c32. Candidates run forward on even repetitions and reversed on odd ones, so slow
drift (heat, caches) does not masquerade as a trend in concurrency.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from npudure.bench.stats import alternating_order

if TYPE_CHECKING:
    from npudure.bench.session import BenchSession


def run_sweep(
    session: BenchSession, per_board: list[int], repetitions: int = 1, boards: list[str] | None = None
) -> dict[str, Any]:
    from npudure.bench.session import RunSpec

    if not per_board or any(c < 1 for c in per_board):
        raise ValueError("sweep concurrencies must be positive integers, e.g. 1,2,4,8")
    chosen = tuple(boards or session.boards)
    n = len(chosen)
    series = session.series_name("sweep")
    candidates = sorted(set(per_board))
    session.progress.experiment(
        f"{series} ({n} boards, per-board concurrency {candidates})", len(candidates) * repetitions
    )
    for rep in range(repetitions):
        for c in alternating_order(candidates, rep):
            session.execute(
                RunSpec(
                    run_id=f"{series}-c{c:03d}-r{rep}",
                    series=series,
                    experiment="sweep",
                    sequence=session.next_sequence(),
                    repetition=rep,
                    boards=chosen,
                    concurrency=c * n,
                    per_board_concurrency=c,
                )
            )
    agg = session.aggregate(series)
    for warning in agg["warnings"]:
        session.progress.note(f"warning: {warning}")
    return agg


def operating_concurrency(sweep: dict[str, Any]) -> int | None:
    op = sweep.get("operating_point")
    return int(op["per_board_concurrency"]) if op else None
