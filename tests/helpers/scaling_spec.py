"""The one-run scaling RunSpec the live bench tests execute (test_bench_cluster.py, test_emulation_lag.py)."""

from __future__ import annotations

from npudure_workshop.bench import BenchSession, RunSpec


def scaling_spec(session: BenchSession, run_id: str, per_board: int = 2) -> RunSpec:
    """A scaling run over every board of ``session``, ``per_board`` requests outstanding per board."""
    boards = tuple(session.boards)
    return RunSpec(
        run_id=run_id,
        series="scaling",
        experiment="scaling",
        sequence=session.next_sequence(),
        repetition=0,
        boards=boards,
        concurrency=per_board * len(boards),
        per_board_concurrency=per_board,
    )
