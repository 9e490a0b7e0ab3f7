"""Aggregating a group of runs (valid ones only), and the CSV columns every experiment shares.

Invalid runs are counted and listed, never silently dropped.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from npudure_workshop.bench import stats
from npudure_workshop.bench.runs import RunData, percent
from npudure_workshop.bench.samples import STAGES


def conditions(runs: Sequence[RunData], valid: Sequence[RunData]) -> dict[str, Any]:
    first = runs[0]
    spec, meta = first.spec, first.meta
    backends = sorted({r.summary["backend"] for r in valid}) or sorted({r.summary["backend"] for r in runs})
    policies = sorted({str(r.summary["policy"]) for r in runs})
    frames = meta.get("frames") or {}
    settings = meta.get("settings") or {}
    return {
        "backend": " / ".join(backends),
        "boards": list(spec["boards"]),
        "n_boards": len(spec["boards"]),
        "policy": " / ".join(policies),
        "via": spec.get("via", "scheduler"),
        "connections_per_board": (meta.get("cluster_before") or {}).get("connections_per_board"),
        "harness_connections": settings.get("harness_connections"),
        "concurrency_total": spec.get("concurrency"),
        "per_board_concurrency": spec.get("per_board_concurrency"),
        "rate_target_inf_per_s": spec.get("rate"),
        "payload_bytes_mean": frames.get("payload_bytes_mean"),
        "encoding": frames.get("encoding"),
        "frames_distinct": frames.get("frames_distinct"),
        "repetitions_valid": len(valid),
        "repetitions_total": len(runs),
        "window_s_mean": float(np.mean([r.summary["window_s"] for r in runs])),
        "warmup_s": settings.get("warmup_s"),
    }


def aggregate_group(runs: Sequence[RunData]) -> dict[str, Any]:
    valid = [r for r in runs if r.summary["valid"]]
    thr = [r.summary["throughput_inf_per_s"] for r in valid]
    mean, std = stats.mean_std(thr)
    lats = [r.latencies_ms() for r in valid]
    per_board: dict[str, list[np.ndarray]] = defaultdict(list)
    for r in valid:
        for name, lat in r.board_latencies_ms().items():
            per_board[name].append(lat)
    total = sum(a.size for a in lats)
    boards = {}
    for name in sorted(per_board):
        st = stats.pooled_latency_stats(per_board[name])
        n = int(sum(a.size for a in per_board[name]))
        boards[name] = {
            "share": n / total if total else None,
            "samples_ok": n,
            "latency_mean_ms": st["mean"],
            "latency_p50_ms": st["p50"],
            "latency_p99_ms": st["p99"],
        }
    stage_masks = [(r.samples, r.measured_ok()) for r in valid]
    stage_rows = np.concatenate([s.stage_us[m] for s, m in stage_masks]) if stage_masks else np.empty((0, 0))
    stages = {}
    if stage_rows.size:
        for i, name in enumerate(STAGES):
            col = stage_rows[:, i].astype(np.float64) / 1e3
            stages[name.removesuffix("_us")] = {
                "mean_ms": float(col.mean()),
                "p50_ms": float(np.percentile(col, 50)),
                "p99_ms": float(np.percentile(col, 99)),
            }
    return {
        "conditions": conditions(runs, valid),
        "runs": [r.run_id for r in runs],
        "invalid_runs": {r.run_id: r.summary["invalid_reasons"] for r in runs if not r.summary["valid"]},
        "throughput_mean_inf_per_s": mean,
        "throughput_std_inf_per_s": std,
        "throughput_per_run_inf_per_s": [r.summary["throughput_inf_per_s"] for r in runs],
        "latency_pooled_ms": stats.pooled_latency_stats(lats),
        "latency_mean_of_runs_ms": stats.mean_of_run_stats(lats),
        "samples_pooled": int(total),
        "boards": boards,
        "stages_ms": stages,
    }


def group_by(runs: Sequence[RunData], key: Callable[[RunData], Any]) -> dict[Any, list[RunData]]:
    groups: dict[Any, list[RunData]] = defaultdict(list)
    for r in runs:
        groups[key(r)].append(r)
    return dict(sorted(groups.items(), key=lambda kv: kv[0]))


def group_cols(g: dict[str, Any]) -> dict[str, Any]:
    c = g["conditions"]
    pooled, mor = g["latency_pooled_ms"], g["latency_mean_of_runs_ms"]
    return {
        "n_boards": c["n_boards"],
        "concurrency_total": c["concurrency_total"],
        "per_board_concurrency": c["per_board_concurrency"],
        "runs_valid": c["repetitions_valid"],
        "runs_total": c["repetitions_total"],
        "throughput_mean_inf_per_s": g["throughput_mean_inf_per_s"],
        "throughput_std_inf_per_s": g["throughput_std_inf_per_s"],
        **{f"latency_{k}_pooled_ms": pooled[k] for k in stats.LATENCY_KEYS},
        **{f"latency_{k}_mean_of_runs_ms": mor[k] for k in ("p50", "p95", "p99", "p99_9")},
        "samples_pooled": g["samples_pooled"],
        "backend": c["backend"],
        "policy": c["policy"],
        "via": c.get("via", "scheduler"),
        "connections_per_board": c["connections_per_board"],
        "payload_mean_bytes": c["payload_bytes_mean"],
        "encoding": c["encoding"],
        "window_mean_s": c["window_s_mean"],
    }


def board_cols(board: str, v: dict[str, Any]) -> dict[str, Any]:
    return {
        "board": board,
        "share_pct": percent(v["share"]),
        "samples_ok": v["samples_ok"],
        "latency_mean_ms": v["latency_mean_ms"],
        "latency_p50_ms": v["latency_p50_ms"],
        "latency_p99_ms": v["latency_p99_ms"],
    }


def point_tables(
    name: str,
    agg: dict[str, Any],
    key: str,
    key_value: Callable[[str], Any],
    extra: Callable[[dict[str, Any]], dict[str, Any]],
) -> dict[str, list[dict[str, Any]]]:
    """``<name>.csv``, ``<name>_boards.csv``, ``<name>_stages.csv`` for an experiment whose aggregate is
    ``points`` keyed by one number (``key``): the group columns, then the experiment's ``extra`` ones."""
    rows, board_rows, stage_rows = [], [], []
    for point, g in agg["points"].items():
        row: dict[str, Any] = {key: key_value(point), **group_cols(g), **extra(g)}
        rows.append(row)
        board_rows += [{key: row[key], **board_cols(b, v)} for b, v in g["boards"].items()]
        stage_rows += [{key: row[key], "stage": st, **v} for st, v in g["stages_ms"].items()]
    return {f"{name}.csv": rows, f"{name}_boards.csv": board_rows, f"{name}_stages.csv": stage_rows}
