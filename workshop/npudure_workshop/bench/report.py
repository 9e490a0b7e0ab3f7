"""report.md: the run's header, invalid runs and warnings, each experiment's section, telemetry.

Throughput is never printed without efficiency (and vice versa) where both exist, and every table
says under which conditions it was measured — backend first, so an emulated figure can never pass
for an NPU figure. The plots are bench.plots; the terminal text bench.terminal.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from npudure_workshop.bench import experiments, fmt
from npudure_workshop.bench.plots import plot_all


def _telemetry_md(summary: dict[str, Any]) -> list[str]:
    per_board: dict[str, dict[str, list[float]]] = {}
    for run in summary["runs"]:
        for board, t in run["telemetry"].items():
            d = per_board.setdefault(board, {"temp": [], "freq": [], "user": [], "sys": [], "n": []})
            for key, src in (
                ("temp", "max_temp_during_load_c"),
                ("freq", "min_cpu_freq_during_load_mhz"),
                ("user", "cpu_user_ms_per_request"),
                ("sys", "cpu_system_ms_per_request"),
                ("n", "telemetry_samples_during_load"),
            ):
                if t.get(src) is not None:
                    d[key].append(t[src])
    lines = [
        "## Telemetry during load",
        "",
        "Sampled every second WHILE load ran (never after); only samples inside each measurement window "
        "count. Empty = the board reports no such sensor (never 0).",
        "",
    ]
    rows = [
        [
            b,
            fmt.f(max(d["temp"]) if d["temp"] else None),
            fmt.f(min(d["freq"]) if d["freq"] else None, ".0f"),
            fmt.f(float(np.median(d["user"])) if d["user"] else None, ".2f"),
            fmt.f(float(np.median(d["sys"])) if d["sys"] else None, ".2f"),
            int(sum(d["n"])),
        ]
        for b, d in sorted(per_board.items())
    ]
    lines.append(
        fmt.table(
            [
                "board",
                "max temp during load °C",
                "min CPU clock during load MHz",
                "agent CPU user ms/request (median of runs)",
                "agent CPU system ms/request",
                "samples during load",
            ],
            rows,
        )
    )
    lines += ["", "![telemetry over time](plots/telemetry.png)", ""]
    return lines


def _models_md(summary: dict[str, Any]) -> list[str]:
    """Per run, each model's share of a mixed load (--mix); nothing when no run served two models."""
    rows = [
        [
            r["run_id"],
            name,
            m["samples_ok"],
            fmt.f(m["share"], ".1%"),
            fmt.f(m["throughput_inf_per_s"]),
            fmt.f(m["latency_p50_ms"]),
            fmt.f(m["latency_p99_ms"]),
        ]
        for r in summary["runs"]
        if len(r.get("models") or {}) > 1
        for name, m in r["models"].items()
    ]
    if not rows:
        return []
    headers = ["run", "model", "answered", "share", "inf/s", "p50 ms", "p99 ms"]
    return ["## Models of the mixed load", "", fmt.table(headers, rows), ""]


def write_report(
    folder: Path, summary: dict[str, Any], runs: Sequence[Any], manifest: dict[str, Any]
) -> None:
    lines = [
        f"# NPUDure benchmark {summary['result_dir']}",
        "",
        f"- target: `{summary['target']}`; started {manifest.get('started_at_utc')}, finished "
        f"{manifest.get('finished_at_utc')}; harness {manifest.get('harness_version')}",
        f"- command: `{' '.join(manifest.get('command') or [])}`",
        f"- frames: {manifest.get('frames', {}).get('frame_source')}, "
        f"{manifest.get('frames', {}).get('encoding')}, mean payload "
        f"{fmt.f(manifest.get('frames', {}).get('payload_bytes_mean'), ',.0f')} B",
        f"- runs: {summary['runs_valid']} valid / {summary['runs_total']} total",
    ]
    backends = sorted({r["backend"] for r in summary["runs"]})
    lines.append(f"- backend: **{' / '.join(backends) or fmt.NA}**")
    emulations = sorted({r["emulation"] for r in summary["runs"] if r.get("emulation")})
    for emulation in emulations:
        lines.append(f"- emulated NPU model: {emulation}")
    if manifest.get("interrupted"):
        lines.append(f"- ⚠ INTERRUPTED: {manifest['interrupted']} (runs completed before it are kept)")
    for p in manifest.get("restore_problems") or []:
        lines.append(f"- ⚠ NOT RESTORED: {p}")
    lines.append("")
    invalid = [r for r in summary["runs"] if not r["valid"]]
    if invalid:
        lines += ["## Invalid runs (kept, excluded from aggregates)", ""]
        lines.append(
            fmt.table(["run", "reasons"], [[r["run_id"], "<br>".join(r["invalid_reasons"])] for r in invalid])
        )
        lines.append("")
    # Group warnings that differ only in their numbers: "12 run(s): the host's CPUs were 99% busy ...".
    grouped: dict[str, list[str]] = {}
    for run in summary["runs"]:
        for w in run["warnings"]:
            grouped.setdefault(re.sub(r"[\d.]+", "#", w), []).append(w)
    if grouped:
        lines += ["Warnings (not invalidating):"]
        lines += [f"- {len(ws)} run(s), e.g.: {ws[0]}" for ws in grouped.values()]
        lines.append("")
    for name, agg in summary["experiments"].items():
        lines += experiments.get(agg["kind"]).markdown(name, agg)
    lines += _models_md(summary)
    lines += _telemetry_md(summary)
    lines += [
        "## Files",
        "",
        "- `runs/<run>/samples.npz` raw per-request samples (times in s since the run start, stage "
        "timings in µs); `runs/<run>/run.json` what was asked and the validity inputs; "
        "`runs/<run>/telemetry.csv` every board every second",
        "- `runs.csv` one row per run (valid or not); `<experiment>.csv`, `<experiment>_boards.csv`, "
        "`<experiment>_stages.csv` aggregates; `telemetry.csv` all telemetry; `summary.json` everything",
        f"- recompute and check every figure: `npudure bench recompute {folder}`",
        "",
    ]
    (folder / "report.md").write_text("\n".join(lines))
    # A board's virtualenv has no matplotlib (the controller extra): `bench contexts` runs there, and
    # its report is complete without the pictures.
    if importlib.util.find_spec("matplotlib") is not None:
        plot_all(folder, summary, runs)
