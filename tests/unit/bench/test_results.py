"""Result folders: exclusive, raw samples kept, units in every column, summaries recomputable."""

from __future__ import annotations

import csv
import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from npudure_workshop.bench import cli
from npudure_workshop.bench.recompute import recompute
from npudure_workshop.bench.results import ResultDir, ResultDirExists, write_csv, write_json
from npudure_workshop.bench.samples import STAGES, Samples
from npudure_workshop.bench.session import finalize
from npudure_workshop.bench.telemetry_log import columns

# Columns that are labels, flags or plain counts (dimensionless); every other column must name its unit.
DIMENSIONLESS = {
    "run_id",
    "series",
    "sequence",
    "repetition",
    "mode",
    "valid",
    "invalid_reasons",
    "boards_asked",
    "n_boards",
    "per_board_concurrency",
    "concurrency_total",
    "policy",
    "cap_board",
    "backend",
    "samples_ok",
    "samples_error",
    "scheduler_cpu_check",
    "board",
    "stage",
    "encoding",
    "runs_valid",
    "runs_total",
    "samples_pooled",
    "fraction_of_peak",
    "is_operating_point",
    "slowest_board",
    "fastest_board",
    "state",
    "source",
    "boot_id",
    "generator_behind_schedule_runs",
    "scheduler_in_flight",
    "scheduler_served_total",
    "cluster_served_total",
    "node_served_total",
    "connections_per_board",
    "via",
    "noted",
}
UNIT_SUFFIXES = ("_ms", "_s", "_inf_per_s", "_pct", "_pct_of_core", "_c", "_mhz", "_x", "_bytes")


def _synthetic_run(result: ResultDir, run_id: str, sequence: int) -> None:
    """Two boards, a request every 25 ms from t=0.01 s, each answered in exactly 100 ms; window [1, 4)."""
    folder = result.run_dir(run_id)
    k = np.arange(200)
    sent = 0.01 + k * 0.025
    n = sent.size
    samples = Samples(
        intended_s=sent,
        sent_s=sent,
        done_s=sent + 0.1,
        status_code=np.zeros(n, np.int16),
        node_idx=(k % 2).astype(np.int16),
        attempts=np.ones(n, np.uint8),
        emulated=np.ones(n, bool),
        backend_idx=np.zeros(n, np.int16),
        stage_us=np.full((n, len(STAGES)), 1000, np.uint64),
        node_names=["board1", "board2"],
        backend_names=["sim"],
    )
    samples.save(folder / "samples.npz")
    rows: list[dict[str, Any]] = [
        {
            "run_id": run_id,
            "t_s": float(t),
            "board": b,
            "source": "node",
            "state": "UP",
            "boot_id": f"boot-{b}",
            "node_served_total": 20 * t,
            "process_cpu_user_s": 0.01 * t,
            "process_cpu_system_s": 0.005 * t,
            "thermal_soc_c": 50.0 + t,
            "cpu_freq_policy0_mhz": 2208 - 100 * t,
        }
        for t in range(6)
        for b in ("board1", "board2")
    ]
    write_csv(folder / "telemetry.csv", rows, columns(rows))
    write_json(
        folder / "run.json",
        {
            "spec": {
                "run_id": run_id,
                "series": "scaling",
                "experiment": "scaling",
                "sequence": sequence,
                "repetition": sequence - 1,
                "boards": ["board1", "board2"],
                "mode": "closed",
                "concurrency": 4,
                "per_board_concurrency": 2,
                "caps": {},
                "cap_board": None,
            },
            "settings": {"warmup_s": 1.0, "harness_connections": 2},
            "frames": {"encoding": "raw", "payload_bytes_mean": 1228800.0, "frames_distinct": 16},
            "t0_unix_s": 1_700_000_000.0 + 10 * sequence,
            "window_start_s": 1.0,
            "window_end_s": 4.0,
            "responses_ok_total": n,
            "generator_cpu": {
                "loop_thread_fraction_of_core": 0.1,
                "process_fraction_of_core": 0.2,
                "cpu_count": 2,
            },
            "scheduler_cpu": {"status": "unknown", "reason": "synthetic"},
            "boot_ids_before": {"board1": "boot-board1", "board2": "boot-board2"},
            "boot_ids_after": {"board1": "boot-board1", "board2": "boot-board2"},
            "cluster_before": {"policy": "least_inflight", "connections_per_board": 2},
            "cluster_served_before": 0,
            "cluster_served_after": n,
            "lease_problem": None,
            "schedule": {},
        },
    )


@pytest.fixture
def synthetic(tmp_path: Path) -> ResultDir:
    result = ResultDir.create(tmp_path / "res")
    write_json(result.path / "manifest.json", {"target": "127.0.0.1:1", "settings": {"warmup_s": 1.0}})
    _synthetic_run(result, "scaling-n2-r0", 1)
    _synthetic_run(result, "scaling-n2-r1", 2)
    finalize(result)
    return result


def test_result_folder_is_never_reused(tmp_path: Path) -> None:
    first = ResultDir.create(tmp_path / "out")
    (first.path / "precious.csv").write_text("15 runs\n")
    with pytest.raises(ResultDirExists, match="already exists"):
        ResultDir.create(tmp_path / "out")
    assert (first.path / "precious.csv").read_text() == "15 runs\n"
    with pytest.raises(ResultDirExists):
        first.run_dir("r1") and first.run_dir("r1")


def test_default_result_folders_are_fresh_each_time(tmp_path: Path) -> None:
    a = ResultDir.create(None, base=tmp_path)
    b = ResultDir.create(None, base=tmp_path)
    assert a.path != b.path and a.path.parent == b.path.parent == tmp_path
    # <UTC time>-<id>: a parseable UTC timestamp (within a minute of now) and a 6-hex-digit id.
    stamp, _, ident = a.path.name.partition("-")
    made = datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    assert abs((datetime.now(UTC) - made).total_seconds()) < 60
    assert re.fullmatch(r"[0-9a-f]{6}", ident), a.path.name
    assert a.path.name.partition("-")[2] != b.path.name.partition("-")[2]  # distinct ids, not only times


def test_summary_figures_from_synthetic_raw_samples(synthetic: ResultDir) -> None:
    summary = json.loads((synthetic.path / "summary.json").read_text())
    run = summary["runs"][0]
    # Completions with done in [1, 4]: sent in [0.9, 3.9] -> k = 36..155 -> 120 in 3 s.
    assert run["throughput_inf_per_s"] == pytest.approx(40.0)
    # Intended send in [1, 4): k = 40..159 -> 120 measured samples, each 100 ms.
    assert run["samples_ok"] == 120
    # Little's law cross-check: 4 outstanding / 0.1 s = 40/s, the same as counted.
    assert run["throughput_littles_law_inf_per_s"] == pytest.approx(40.0)
    assert run["latency_ms"]["p50"] == pytest.approx(100.0) and run["latency_ms"]["max"] == pytest.approx(
        100.0
    )
    assert run["valid"], run["invalid_reasons"]
    assert run["backend"] == "EMULATED NPU (sim backend)"
    tele = run["telemetry"]["board1"]
    # Samples at t = 1..4 are inside the window; t = 5 (after the load) must not count.
    assert tele["max_temp_during_load_c"] == 54.0
    assert tele["min_cpu_freq_during_load_mhz"] == 2208 - 400
    assert tele["telemetry_samples_during_load"] == 4
    # CPU per request: (0.04 - 0.01) s user over 60 requests = 0.5 ms.
    assert tele["cpu_user_ms_per_request"] == pytest.approx(0.5)
    scaling = summary["experiments"]["scaling"]["points"]["2"]
    assert scaling["samples_pooled"] == 240
    assert scaling["boards"]["board1"]["share"] == pytest.approx(0.5)
    assert scaling["stages_ms"]["inference"]["mean_ms"] == pytest.approx(1.0)


def test_report_csvs_and_plots_are_written(synthetic: ResultDir) -> None:
    for name in (
        "summary.json",
        "report.md",
        "runs.csv",
        "scaling.csv",
        "scaling_boards.csv",
        "scaling_stages.csv",
        "telemetry.csv",
        "plots/scaling_scaling.png",
        "plots/scaling_latency_cdf.png",
        "plots/telemetry.png",
    ):
        assert (synthetic.path / name).is_file(), name
    report = (synthetic.path / "report.md").read_text()
    assert "EMULATED NPU (sim backend)" in report and "efficiency" in report


def test_every_csv_column_names_its_unit(synthetic: ResultDir) -> None:
    for path in synthetic.path.glob("*.csv"):
        with path.open() as f:
            header = next(csv.reader(f))
        for col in header:
            if col in DIMENSIONLESS:
                continue
            assert col.endswith(UNIT_SUFFIXES), f"{path.name}: column {col!r} does not say its unit"


def test_absent_values_are_empty_cells_never_zero(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "t.csv", [{"thermal_npu_c": None, "x_ms": 1.5}])
    assert path.read_text().splitlines()[1] == ",1.5"


def test_recompute_matches_then_catches_a_tampered_summary(synthetic: ResultDir) -> None:
    _, diffs = recompute(synthetic.path)
    assert diffs == []
    summary_path = synthetic.path / "summary.json"
    summary = json.loads(summary_path.read_text())
    summary["runs"][0]["throughput_inf_per_s"] = 41.0
    summary_path.write_text(json.dumps(summary))
    _, diffs = recompute(synthetic.path)
    assert len(diffs) == 1 and "runs[0].throughput_inf_per_s" in diffs[0]


def test_recompute_catches_changed_raw_samples(synthetic: ResultDir) -> None:
    path = synthetic.path / "runs" / "scaling-n2-r1" / "samples.npz"
    samples = Samples.load(path)
    samples.done_s = samples.done_s + 0.05  # every request 50 ms slower
    samples.save(path)
    _, diffs = recompute(synthetic.path)
    assert any("latency" in d for d in diffs)


def test_recompute_cli_exit_codes(
    synthetic: ResultDir, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli._recompute(synthetic.path) == cli.EXIT_OK
    assert "every figure matches" in capsys.readouterr().out
    assert cli._recompute(tmp_path / "nope") == cli.EXIT_REFUSED


def _quiet_sweep(out: Path) -> int:
    """`npudure bench sweep` of one frame against a port nobody listens on, into ``out``."""
    from npudure.cli import main

    argv = ["bench", "sweep", "--target", "127.0.0.1:9", "--out", str(out), "--frames", "1"]
    return main([*argv, "--progress", "quiet"])


def test_cli_refuses_an_existing_out_folder_before_contacting_anyone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "taken").mkdir()
    rc = _quiet_sweep(tmp_path / "taken")
    assert rc == cli.EXIT_REFUSED
    assert "already exists" in capsys.readouterr().err


@pytest.mark.parametrize("mode", ["bar", "lines", "quiet"])
def test_progress_modes(mode: str, capsys: pytest.CaptureFixture[str]) -> None:
    from npudure_workshop.bench.progress import Progress

    progress = Progress(mode)
    progress.experiment("sweep", 2)
    progress.run_started("sweep-c001-r0", 3.0)
    progress.tick(1.5)
    progress.run_done("sweep-c001-r0 done")
    progress.close()
    err = capsys.readouterr().err
    assert ("sweep-c001-r0 done" in err) is (mode != "quiet")
