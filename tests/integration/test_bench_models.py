"""Integration: `npudure bench --mix` against two emulated models on real agents and a real scheduler:
each run reports every model's throughput and tails, in the ratio asked (EMULATED NPU: sim models are
names)."""

from __future__ import annotations

import json
from pathlib import Path

from helpers.cli import run_npudure

from npudure_workshop.bench.results import ResultDir
from npudure_workshop.bench.runs import load_run
from npudure_workshop.lab.local import LocalCluster


def test_a_mixed_load_reports_each_models_share(tmp_path: Path) -> None:
    with LocalCluster(boards=2, models={"general": None, "plates": None}, time_scale=10.0) as cluster:
        out = tmp_path / "mix"
        proc = run_npudure(
            "bench", "openloop", "--target", cluster.address, "--rates", "12", "--quick",
            "--encoding", "jpeg", "--mix", "general=3,plates=1", "--out", str(out), "--progress", "quiet",
            timeout_s=240,
        )  # fmt: skip
        assert proc.returncode in (0, 3), proc.stderr[-2000:]  # 3: a run invalid on this shared host
    assert (
        "models general x3, plates x1"
        in json.loads((out / "manifest.json").read_text())["frames"]["frame_source"]
    )
    (run_dir,) = (out / "runs").iterdir()
    summary = load_run(ResultDir(out), run_dir.name).summary
    models = summary["models"]
    assert set(models) == {"general", "plates"}
    assert sum(m["samples_ok"] for m in models.values()) == summary["samples_ok"]
    assert 0.6 < models["general"]["share"] < 0.9  # 3 of 4 asked
    assert all(m["latency_p99_ms"] >= m["latency_p50_ms"] > 0 for m in models.values())
    report = (out / "report.md").read_text()
    assert "## Models of the mixed load" in report and "| plates |" in report


def test_a_mix_over_http_is_refused_in_one_line() -> None:
    proc = run_npudure(
        "bench", "openloop", "--target", "127.0.0.1:1", "--rates", "10", "--api", "http", "--mix", "a=1,b=1"
    )
    assert proc.returncode != 0 and "--model/--mix name models over gRPC only" in proc.stderr
