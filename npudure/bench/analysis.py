"""From raw files to figures: per-run summaries and per-experiment aggregates.

Everything here reads only what a result folder holds (run.json, samples.npz, telemetry.csv), so the
same code produces the summary at the end of a benchmark and ``npudure bench recompute`` later.
Aggregates use VALID runs only; invalid runs are counted and listed, never silently dropped.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from npudure.bench import stats, validity
from npudure.bench.results import ResultDir, read_csv, read_json
from npudure.bench.samples import STAGES, Samples
from npudure.bench.telemetry_log import summarize_board

SCHEMA = "npudure-bench-summary/1"


@dataclass
class RunData:
    run_id: str
    meta: dict[str, Any]
    samples: Samples
    telemetry: list[dict[str, Any]]
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def spec(self) -> dict[str, Any]:
        return self.meta["spec"]

    @property
    def window(self) -> tuple[float, float]:
        return float(self.meta["window_start_s"]), float(self.meta["window_end_s"])

    def measured_ok(self) -> np.ndarray:
        return self.samples.measured(*self.window) & self.samples.ok

    def latencies_ms(self) -> np.ndarray:
        return self.samples.latency_ms[self.measured_ok()]

    def board_latencies_ms(self) -> dict[str, np.ndarray]:
        mask = self.measured_ok()
        lat = self.samples.latency_ms
        return {
            name: lat[mask & (self.samples.node_idx == i)] for i, name in enumerate(self.samples.node_names)
        }


def load_run(result: ResultDir, run_id: str) -> RunData:
    folder = result.path / "runs" / run_id
    meta = read_json(folder / "run.json")
    samples = Samples.load(folder / "samples.npz")
    tele_path = folder / "telemetry.csv"
    telemetry = read_csv(tele_path) if tele_path.is_file() else []
    run = RunData(run_id, meta, samples, telemetry)
    run.summary = summarize_run(run)
    return run


# ---------------------------------------------------------------------------------------------- one run
def backend_label(samples: Samples, mask: np.ndarray) -> tuple[str, list[str], bool]:
    """ "EMULATED NPU (sim backend)" when the responses said emulated; the backends seen; emulated?"""
    answered = mask & (samples.backend_idx >= 0)
    names = sorted({samples.backend_names[i] for i in np.unique(samples.backend_idx[answered])})
    emulated = bool(samples.emulated[answered].any())
    if not names:
        return "unknown (no successful response)", names, emulated
    labels = []
    for name in names:
        if emulated and name == "sim":
            labels.append("EMULATED NPU (sim backend)")
        elif name == "rknn":
            labels.append("RKNN NPU (rknn backend)")
        elif name == "onnx":
            labels.append("ONNX Runtime on CPU, no NPU (onnx backend)")
        else:
            labels.append(f"{'EMULATED ' if emulated else ''}{name} backend")
    return " + ".join(labels), names, emulated


def _quarters(run: RunData, ok: np.ndarray) -> list[dict[str, Any]]:
    start, end = run.window
    edges = np.linspace(start, end, 5)
    out = []
    s = run.samples
    for q in range(4):
        in_q = ok & (s.intended_s >= edges[q]) & (s.intended_s < edges[q + 1])
        boards = sorted({s.node_names[i] for i in np.unique(s.node_idx[in_q]) if i >= 0})
        out.append(
            {
                "quarter": q + 1,
                "start_s": float(edges[q]),
                "end_s": float(edges[q + 1]),
                "samples_ok": int(in_q.sum()),
                "boards": boards,
            }
        )
    return out


def _stage_means_ms(samples: Samples, mask: np.ndarray) -> dict[str, float | None]:
    if not mask.any():
        return {name.removesuffix("_us"): None for name in STAGES}
    means = samples.stage_us[mask].astype(np.float64).mean(axis=0) / 1e3
    return {name.removesuffix("_us"): float(v) for name, v in zip(STAGES, means, strict=True)}


def summarize_run(run: RunData) -> dict[str, Any]:
    s, spec, meta = run.samples, run.spec, run.meta
    start, end = run.window
    span = end - start
    measured = s.measured(start, end)
    ok = measured & s.ok
    n_ok, n_err = int(ok.sum()), int((measured & ~s.ok).sum())
    completed_in_window = s.ok & (s.done_s >= start) & (s.done_s <= end)
    throughput = float(completed_in_window.sum() / span) if span > 0 else 0.0
    label, backends, emulated = backend_label(s, ok)

    boards: dict[str, Any] = {}
    for name, lat in run.board_latencies_ms().items():
        st = stats.latency_stats(lat)
        boards[name] = {
            "samples_ok": int(lat.size),
            "share": lat.size / n_ok if n_ok else None,
            "latency_mean_ms": st["mean"],
            "latency_p50_ms": st["p50"],
            "latency_p99_ms": st["p99"],
        }
    sched_total = s.stage_us[:, STAGES.index("scheduler_total_us")].astype(np.float64) / 1e3
    via_sched = ok & (sched_total > 0)
    client_overhead = (
        float((s.latency_ms[via_sched] - sched_total[via_sched]).mean()) if via_sched.any() else None
    )

    by_board: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in run.telemetry:
        by_board[str(row["board"])].append(row)
    telemetry = {b: summarize_board(rows, (start, end)) for b, rows in sorted(by_board.items())}

    figures: dict[str, Any] = {
        "samples_ok": n_ok,
        "samples_error": n_err,
        "error_rate": n_err / (n_ok + n_err) if n_ok + n_err else 0.0,
        "answered_boards": sorted({s.node_names[i] for i in np.unique(s.node_idx[ok]) if i >= 0}),
        "answered_by_quarter": _quarters(run, ok),
    }
    reasons, warnings = validity.check(meta, figures, run.telemetry)
    caps = spec.get("caps") or {}
    return {
        "run_id": run.run_id,
        "series": spec["series"],
        "experiment": spec["experiment"],
        "sequence": spec["sequence"],
        "repetition": spec["repetition"],
        "mode": spec["mode"],
        "boards_asked": list(spec["boards"]),
        "n_boards": len(spec["boards"]),
        "per_board_concurrency": spec.get("per_board_concurrency"),
        "concurrency_total": spec.get("concurrency"),
        "rate_target_inf_per_s": spec.get("rate"),
        "arrival": spec.get("arrival"),
        "policy": (meta.get("cluster_before") or {}).get("policy"),
        "cap_board": spec.get("cap_board"),
        "cap_mhz": caps.get(spec.get("cap_board"), 0) if spec.get("cap_board") else None,
        "window_s": span,
        "warmup_s": start,
        **figures,
        "throughput_inf_per_s": throughput,
        # Cross-check for a closed loop: Little's law, concurrency / mean latency (no window-edge noise;
        # far below the measured throughput means the generator did not keep c requests outstanding).
        "throughput_littles_law_inf_per_s": (
            spec["concurrency"] / (float(s.latency_ms[ok].mean()) / 1e3)
            if spec["mode"] == "closed" and spec.get("concurrency") and n_ok
            else None
        ),
        "latency_ms": stats.latency_stats(s.latency_ms[ok]),
        "boards": boards,
        "stages_mean_ms": _stage_means_ms(s, ok),
        "client_to_scheduler_overhead_mean_ms": client_overhead,
        "retried_fraction": float((s.attempts[ok] > 1).mean()) if n_ok else None,
        "backend": label,
        "backends": backends,
        "emulated": emulated,
        "telemetry": telemetry,
        "generator_cpu": meta.get("generator_cpu"),
        "scheduler_cpu": meta.get("scheduler_cpu"),
        "schedule": meta.get("schedule") or None,
        "valid": not reasons,
        "invalid_reasons": reasons,
        "warnings": warnings,
    }


def run_row(summary: dict[str, Any]) -> dict[str, Any]:
    """One flat runs.csv row; every column name carries its unit."""
    lat = summary["latency_ms"]
    gen = summary.get("generator_cpu") or {}
    sched = summary.get("scheduler_cpu") or {}
    sched_fracs = [v for v in (sched.get("fraction_of_core_by_pid") or {}).values() if v is not None]
    temps = [
        t["max_temp_during_load_c"]
        for t in summary["telemetry"].values()
        if t.get("max_temp_during_load_c") is not None
    ]
    freqs = [
        t["min_cpu_freq_during_load_mhz"]
        for t in summary["telemetry"].values()
        if t.get("min_cpu_freq_during_load_mhz") is not None
    ]
    return {
        "run_id": summary["run_id"],
        "series": summary["series"],
        "sequence": summary["sequence"],
        "repetition": summary["repetition"],
        "mode": summary["mode"],
        "valid": summary["valid"],
        "invalid_reasons": " | ".join(summary["invalid_reasons"]),
        "boards_asked": " ".join(summary["boards_asked"]),
        "n_boards": summary["n_boards"],
        "per_board_concurrency": summary["per_board_concurrency"],
        "concurrency_total": summary["concurrency_total"],
        "rate_target_inf_per_s": summary["rate_target_inf_per_s"],
        "policy": summary["policy"],
        "cap_board": summary["cap_board"],
        "cap_mhz": summary["cap_mhz"],
        "backend": summary["backend"],
        "window_s": summary["window_s"],
        "samples_ok": summary["samples_ok"],
        "samples_error": summary["samples_error"],
        "error_rate_pct": summary["error_rate"] * 100,
        "throughput_inf_per_s": summary["throughput_inf_per_s"],
        "throughput_littles_law_inf_per_s": summary["throughput_littles_law_inf_per_s"],
        **{f"latency_{k}_ms": lat[k] for k in stats.LATENCY_KEYS},
        "generator_loop_thread_cpu_pct_of_core": _pct(gen.get("loop_thread_fraction_of_core")),
        "generator_process_cpu_pct_of_core": _pct(gen.get("process_fraction_of_core")),
        "scheduler_cpu_max_pct_of_core": _pct(max(sched_fracs)) if sched_fracs else None,
        "scheduler_cpu_check": sched.get("status", "unknown"),
        "max_temp_during_load_c": max(temps) if temps else None,
        "min_cpu_freq_during_load_mhz": min(freqs) if freqs else None,
    }


def _pct(fraction: float | None) -> float | None:
    return None if fraction is None else fraction * 100


# ---------------------------------------------------------------------------------------------- groups
def _conditions(runs: Sequence[RunData], valid: Sequence[RunData]) -> dict[str, Any]:
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
        "conditions": _conditions(runs, valid),
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


def _group_by(runs: Sequence[RunData], key: Callable[[RunData], Any]) -> dict[Any, list[RunData]]:
    groups: dict[Any, list[RunData]] = defaultdict(list)
    for r in runs:
        groups[key(r)].append(r)
    return dict(sorted(groups.items(), key=lambda kv: kv[0]))


def aggregate_sweep(runs: Sequence[RunData]) -> dict[str, Any]:
    groups = {
        c: aggregate_group(rs) for c, rs in _group_by(runs, lambda r: r.spec["per_board_concurrency"]).items()
    }
    curve = {
        c: g["throughput_mean_inf_per_s"]
        for c, g in groups.items()
        if g["throughput_mean_inf_per_s"] is not None
    }
    op = stats.operating_point(curve)
    warnings = list(op.warnings) if op else ["no concurrency had a valid run: no operating point"]
    missing = [c for c, g in groups.items() if g["throughput_mean_inf_per_s"] is None]
    if missing:
        warnings.append(f"concurrencies with no valid run (left out of the curve): {missing}")
    for c, g in groups.items():
        x = g["throughput_mean_inf_per_s"]
        g["fraction_of_peak"] = (
            x / op.peak_throughput if (op and x is not None and op.peak_throughput) else None
        )
        g["is_operating_point"] = bool(op and c == op.concurrency)
    return {
        "kind": "sweep",
        "points": {str(c): g for c, g in groups.items()},
        "operating_point": op.as_dict() if op else None,
        "warnings": warnings,
    }


def aggregate_scaling(runs: Sequence[RunData]) -> dict[str, Any]:
    groups = {n: aggregate_group(rs) for n, rs in _group_by(runs, lambda r: len(r.spec["boards"])).items()}
    x1 = groups[1]["throughput_mean_inf_per_s"] if 1 in groups else None
    warnings = []
    if x1 is None:
        warnings.append("no valid 1-board run: efficiency cannot be computed")
    for n, g in groups.items():
        x = g["throughput_mean_inf_per_s"]
        g["efficiency"] = stats.efficiency(x, n, x1)
        g["ideal_throughput_inf_per_s"] = n * x1 if x1 is not None else None
        g["speedup_x"] = x / x1 if (x is not None and x1) else None
    return {"kind": "scaling", "points": {str(n): g for n, g in groups.items()}, "warnings": warnings}


def aggregate_hetero(runs: Sequence[RunData]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for policy, by_policy in _group_by(runs, lambda r: r.spec.get("policy") or "").items():
        rungs = {}
        groups = _group_by(by_policy, lambda r: (r.spec.get("caps") or {}).get(r.spec["cap_board"], 0))
        # Ladder order: the uncapped baseline first, then from the highest clock down.
        for cap in sorted(groups, key=lambda mhz: (mhz != 0, -mhz)):
            rs = groups[cap]
            g = aggregate_group(rs)
            means = {b: v["latency_mean_ms"] for b, v in g["boards"].items()}
            p50s = {b: v["latency_p50_ms"] for b, v in g["boards"].items()}
            g["spread_mean_latency_x"], g["slowest_board"], g["fastest_board"] = stats.spread(means)
            g["spread_p50_latency_x"] = stats.spread(p50s)[0]
            g["cap_board"] = rs[0].spec["cap_board"]
            g["cap_mhz"] = cap
            rungs[str(cap)] = g
        out[policy] = rungs
    return {"kind": "hetero", "policies": out, "warnings": []}


def aggregate_openloop(runs: Sequence[RunData]) -> dict[str, Any]:
    points = {}
    for rate, rs in _group_by(runs, lambda r: r.spec["rate"]).items():
        g = aggregate_group(rs)
        schedules = [r.meta.get("schedule") or {} for r in rs]
        g["send_lag_p99_ms_max"] = max((s.get("send_lag_p99_ms", 0.0) for s in schedules), default=None)
        g["generator_behind_schedule_runs"] = sum(bool(s.get("generator_behind_schedule")) for s in schedules)
        points[str(rate)] = g
    return {"kind": "openloop", "points": points, "warnings": []}


AGGREGATORS: dict[str, Callable[[Sequence[RunData]], dict[str, Any]]] = {
    "sweep": aggregate_sweep,
    "scaling": aggregate_scaling,
    "hetero": aggregate_hetero,
    "openloop": aggregate_openloop,
}


# ---------------------------------------------------------------------------------------------- tables
def experiment_tables(name: str, agg: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """CSV rows for one experiment; file names carry the series name."""
    kind = agg["kind"]
    if kind == "hetero":
        rows, board_rows = [], []
        for policy, rungs in agg["policies"].items():
            for g in rungs.values():
                rows.append(
                    {
                        "policy": policy,
                        "cap_board": g["cap_board"],
                        "cap_mhz": g["cap_mhz"],
                        **_group_cols(g),
                        "spread_mean_latency_x": g["spread_mean_latency_x"],
                        "spread_p50_latency_x": g["spread_p50_latency_x"],
                        "slowest_board": g["slowest_board"],
                        "fastest_board": g["fastest_board"],
                    }
                )
                board_rows += [
                    {"policy": policy, "cap_mhz": g["cap_mhz"], **_board_cols(b, v)}
                    for b, v in g["boards"].items()
                ]
        return {f"{name}.csv": rows, f"{name}_boards.csv": board_rows}
    key = {"sweep": "per_board_concurrency", "scaling": "n_boards", "openloop": "rate_target_inf_per_s"}[kind]
    rows, board_rows, stage_rows = [], [], []
    for point, g in agg["points"].items():
        row: dict[str, Any] = {key: float(point) if kind == "openloop" else int(point), **_group_cols(g)}
        if kind == "sweep":
            row.update(fraction_of_peak=g["fraction_of_peak"], is_operating_point=g["is_operating_point"])
        if kind == "scaling":
            row.update(
                efficiency_pct=_pct(g["efficiency"]),
                ideal_throughput_inf_per_s=g["ideal_throughput_inf_per_s"],
                speedup_x=g["speedup_x"],
            )
        if kind == "openloop":
            row.update(
                send_lag_p99_ms_max=g["send_lag_p99_ms_max"],
                generator_behind_schedule_runs=g["generator_behind_schedule_runs"],
            )
        rows.append(row)
        board_rows += [{key: row[key], **_board_cols(b, v)} for b, v in g["boards"].items()]
        stage_rows += [{key: row[key], "stage": st, **v} for st, v in g["stages_ms"].items()]
    return {f"{name}.csv": rows, f"{name}_boards.csv": board_rows, f"{name}_stages.csv": stage_rows}


def _group_cols(g: dict[str, Any]) -> dict[str, Any]:
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
        "connections_per_board": c["connections_per_board"],
        "payload_mean_bytes": c["payload_bytes_mean"],
        "encoding": c["encoding"],
        "window_mean_s": c["window_s_mean"],
    }


def _board_cols(board: str, v: dict[str, Any]) -> dict[str, Any]:
    return {
        "board": board,
        "share_pct": _pct(v["share"]),
        "samples_ok": v["samples_ok"],
        "latency_mean_ms": v["latency_mean_ms"],
        "latency_p50_ms": v["latency_p50_ms"],
        "latency_p99_ms": v["latency_p99_ms"],
    }


# ---------------------------------------------------------------------------------------------- all
def build_summary(result: ResultDir) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]], list[RunData]]:
    """(summary.json content, CSV tables by file name, the runs) — from the folder's raw files only."""
    manifest = read_json(result.path / "manifest.json")
    runs = [load_run(result, run_id) for run_id in result.run_ids()]
    series: dict[str, list[RunData]] = defaultdict(list)
    for r in runs:
        series[r.spec["series"]].append(r)
    experiments = {name: AGGREGATORS[rs[0].spec["experiment"]](rs) for name, rs in series.items()}
    tables: dict[str, list[dict[str, Any]]] = {"runs.csv": [run_row(r.summary) for r in runs]}
    for name, agg in experiments.items():
        tables.update(experiment_tables(name, agg))
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
        "experiments": experiments,
        "runs": [r.summary for r in runs],
    }
    return summary, tables, runs


def load_summary(path: Path) -> dict[str, Any]:
    return read_json(path)
