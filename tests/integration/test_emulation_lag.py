"""A run on emulated boards the host cannot keep up with is invalid with the lag reason; a run within the
host's means is valid (real scheduler and sim agents as processes on loopback, `npudure local`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.host_steal import PLUMBING_MAX_STEAL
from helpers.scaling_spec import scaling_spec

from npudure_workshop.bench import BenchSession, BenchSettings, validity
from npudure_workshop.bench.payloads import make_frame_set
from npudure_workshop.lab.local import LocalCluster


def _run(time_scale: float, per_board: int, out: Path) -> dict:
    frames = make_frame_set("raw", count=2, seed=5)
    # The lag rule is under test, not the host's steal (helpers/host_steal.py).
    settings = BenchSettings(
        warmup_s=0.5, duration_s=3.0, settle_s=0.0, max_steal_fraction=PLUMBING_MAX_STEAL
    )
    with (
        LocalCluster(boards=2, time_scale=time_scale, policy="least_inflight") as cluster,
        BenchSession(cluster.address, out, settings, frames, progress="quiet", command=["test"]) as bench,
    ):
        boards = tuple(bench.boards)
        run = bench.execute(scaling_spec(bench, "r", per_board))
        lags = validity.emulation_lag_by_board(
            run.telemetry, list(boards), (run.meta["window_start_s"], run.meta["window_end_s"])
        )
    return {"summary": run.summary, "lags": lags, "meta": run.meta}


@pytest.mark.slow
def test_overloaded_emulated_boards_make_the_run_invalid(tmp_path: Path) -> None:
    # time scale 0.02: 0.25 ms per frame, ~8000 inf/s per board asked of a machine that cannot
    # move more than a few hundred 1.2 MB frames a second.
    got = _run(0.02, 4, tmp_path / "over")
    assert not got["summary"]["valid"]
    lag = [r for r in got["summary"]["invalid_reasons"] if r.startswith("emulation_lag:")]
    assert lag, got["summary"]["invalid_reasons"]
    assert "the emulated boards fell behind their model by" in lag[0]
    assert all(v is not None and v > 0.05 for v in got["lags"].values()), got["lags"]


@pytest.mark.slow
def test_a_run_within_the_hosts_means_is_valid(tmp_path: Path) -> None:
    # time scale 20: 8 inf/s per board, 2 outstanding per board; the host idles.
    got = _run(20.0, 2, tmp_path / "ok")
    assert set(got["lags"]) == {"board1", "board2"}
    assert all(v is not None and v < 0.05 for v in got["lags"].values()), got["lags"]
    assert got["meta"]["host_cpu"]["shared_with_cluster"] is True
    assert got["summary"]["valid"], got["summary"]["invalid_reasons"]
