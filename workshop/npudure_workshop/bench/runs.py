"""From raw files to one run's figures: what a result folder holds for a run, and its summary row.

Everything here reads only what a result folder holds (run.json, samples.npz, telemetry.csv), so the
same code produces the summary at the end of a benchmark and ``npudure bench recompute`` later.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from npudure.backends import sim_npu
from npudure_workshop.bench import stats, validity
from npudure_workshop.bench.results import ResultDir, read_csv, read_json
from npudure_workshop.bench.samples import STAGES, Samples
from npudure_workshop.bench.telemetry_log import summarize_board


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

    def model_latencies_ms(self) -> dict[str, np.ndarray]:
        """Per model that answered (by the name in its replies); empty when no reply named one."""
        mask = self.measured_ok()
        lat = self.samples.latency_ms
        return {
            name: lat[mask & (self.samples.model_idx == i)]
            for i, name in enumerate(self.samples.model_names)
            if name
        }

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


def _shares(groups: dict[str, np.ndarray], n_ok: int, span: float) -> dict[str, Any]:
    """Each group's (a board's, a model's) answers in the window: share, throughput and tails."""
    out: dict[str, Any] = {}
    for name, lat in groups.items():
        st = stats.latency_stats(lat)
        out[name] = {
            "samples_ok": int(lat.size),
            "share": lat.size / n_ok if n_ok else None,
            "throughput_inf_per_s": lat.size / span if span > 0 else None,
            "latency_mean_ms": st["mean"],
            "latency_p50_ms": st["p50"],
            "latency_p99_ms": st["p99"],
        }
    return out


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

    boards = _shares(run.board_latencies_ms(), n_ok, span)
    models = _shares(run.model_latencies_ms(), n_ok, span)
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
        "via": spec.get("via", "scheduler"),
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
        "models": models,
        "stages_mean_ms": _stage_means_ms(s, ok),
        "client_to_scheduler_overhead_mean_ms": client_overhead,
        "retried_fraction": float((s.attempts[ok] > 1).mean()) if n_ok else None,
        "backend": label,
        "backends": backends,
        "emulated": emulated,
        # The model an emulated run measured (docs/sim-model.md): an emulated figure says what it is.
        "emulation": sim_npu.CALIBRATION if emulated else None,
        "telemetry": telemetry,
        "generator_cpu": meta.get("generator_cpu"),
        "scheduler_cpu": meta.get("scheduler_cpu"),
        "schedule": meta.get("schedule") or None,
        "valid": not reasons,
        "invalid_reasons": reasons,
        "warnings": warnings,
        # Planned events (expect_reboot) that happened: the run stays valid, and says so.
        "noted": [w for w in warnings if w.startswith("expected_reboot:")],
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
        "via": summary.get("via", "scheduler"),
        "valid": summary["valid"],
        "invalid_reasons": " | ".join(summary["invalid_reasons"]),
        "noted": " | ".join(summary.get("noted", [])),
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
        "generator_loop_thread_cpu_pct_of_core": percent(gen.get("loop_thread_fraction_of_core")),
        "generator_process_cpu_pct_of_core": percent(gen.get("process_fraction_of_core")),
        "scheduler_cpu_max_pct_of_core": percent(max(sched_fracs)) if sched_fracs else None,
        "scheduler_cpu_check": sched.get("status", "unknown"),
        "max_temp_during_load_c": max(temps) if temps else None,
        "min_cpu_freq_during_load_mhz": min(freqs) if freqs else None,
    }


def percent(fraction: float | None) -> float | None:
    return None if fraction is None else fraction * 100
