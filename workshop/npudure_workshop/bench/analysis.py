"""From a result folder's raw files to summary.json and the CSV tables, one experiment at a time.

Everything here reads only what a result folder holds (run.json, samples.npz, telemetry.csv), so the
same code produces the summary at the end of a benchmark and ``npudure bench recompute`` later.
Each series is aggregated by its experiment (npudure_workshop.bench.experiments), from VALID runs only.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from npudure_workshop.bench import experiments
from npudure_workshop.bench.results import ResultDir, read_json
from npudure_workshop.bench.runs import RunData, load_run, run_row

SCHEMA = "npudure-bench-summary/1"


def aggregate(runs: Sequence[RunData]) -> dict[str, Any]:
    """The aggregate of one series (all its runs share one experiment kind)."""
    return experiments.get(runs[0].spec["experiment"]).aggregate(runs)


def build_summary(result: ResultDir) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]], list[RunData]]:
    """(summary.json content, CSV tables by file name, the runs) — from the folder's raw files only."""
    manifest = read_json(result.path / "manifest.json")
    runs = [load_run(result, run_id) for run_id in result.run_ids()]
    series: dict[str, list[RunData]] = defaultdict(list)
    for r in runs:
        series[r.spec["series"]].append(r)
    summaries = {name: aggregate(rs) for name, rs in series.items()}
    tables: dict[str, list[dict[str, Any]]] = {"runs.csv": [run_row(r.summary) for r in runs]}
    for name, agg in summaries.items():
        tables.update(experiments.get(agg["kind"]).tables(name, agg))
    tables["telemetry.csv"] = [row for r in runs for row in r.telemetry]
    invalid = [r.run_id for r in runs if not r.summary["valid"]]
    summary = {
        "schema": SCHEMA,
        "result_dir": result.path.name,
        "target": manifest.get("target"),
        "settings": manifest.get("settings"),
        "runs_total": len(runs),
        "runs_valid": len(runs) - len(invalid),
        "runs_invalid": invalid,
        "experiments": summaries,
        "runs": [r.summary for r in runs],
    }
    return summary, tables, runs
