"""report.md, the PNG plots, and the short summary printed at the end.

Throughput is never printed without efficiency (and vice versa) where both exist, and every table
says under which conditions it was measured — backend first, so an emulated figure can never pass
for an NPU figure.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

NA = "–"


def _f(value: Any, fmt: str = ".1f", suffix: str = "") -> str:
    if value is None:
        return NA
    try:
        return f"{value:{fmt}}{suffix}"
    except (TypeError, ValueError):
        return str(value)


def _pct(value: float | None) -> str:
    return NA if value is None else f"{value * 100:.1f}%"


def run_line(s: dict[str, Any]) -> str:
    """One line per finished run, for the terminal."""
    lat = s["latency_ms"]
    load = (
        f"c={s['concurrency_total']}"
        if s["mode"] == "closed"
        else f"λ={_f(s['rate_target_inf_per_s'], 'g')}/s"
    )
    cap = f" cap {s['cap_board']}={s['cap_mhz'] or 'none'}" if s.get("cap_board") else ""
    status = "valid" if s["valid"] else "INVALID: " + "; ".join(r.split(":")[0] for r in s["invalid_reasons"])
    return (
        f"{s['run_id']:<34} {s['n_boards']} boards {load:<7}{cap} {_f(s['throughput_inf_per_s'])} inf/s  "
        f"p50 {_f(lat['p50'])} p99 {_f(lat['p99'])} ms  n={s['samples_ok']}  {status}"
    )


def conditions_line(c: dict[str, Any]) -> str:
    load = (
        f"concurrency {c['concurrency_total']} ({c['per_board_concurrency']}/board)"
        if c.get("concurrency_total") is not None
        else f"rate {_f(c.get('rate_target_inf_per_s'), 'g')} inf/s"
    )
    return (
        f"{c['backend']}; boards {', '.join(c['boards'])}; policy {c['policy']}; "
        f"{c['connections_per_board']} connection(s)/board (harness {c['harness_connections']}); {load}; "
        f"payload {_f(c['payload_bytes_mean'], ',.0f')} B {c['encoding']}; "
        f"{c['repetitions_valid']}/{c['repetitions_total']} valid repetitions × {_f(c['window_s_mean'])} s "
        f"(warm-up {_f(c['warmup_s'], 'g')} s discarded)"
    )


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------- markdown
def _sweep_md(name: str, agg: dict[str, Any]) -> list[str]:
    lines = [f"## Saturation curve ({name})", ""]
    rows = []
    for c, g in agg["points"].items():
        p = g["latency_pooled_ms"]
        rows.append(
            [
                c + (" **(operating point)**" if g["is_operating_point"] else ""),
                g["conditions"]["concurrency_total"],
                f"{_f(g['throughput_mean_inf_per_s'])} ± {_f(g['throughput_std_inf_per_s'])}",
                _pct(g["fraction_of_peak"]),
                _f(p["p50"]),
                _f(p["p99"]),
                _f(p["p99_9"]),
                f"{g['conditions']['repetitions_valid']}/{g['conditions']['repetitions_total']}",
            ]
        )
    lines.append(
        _table(
            [
                "per-board concurrency",
                "total",
                "throughput inf/s (mean ± sd)",
                "of peak",
                "p50 ms",
                "p99 ms",
                "p99.9 ms",
                "valid runs",
            ],
            rows,
        )
    )
    op = agg["operating_point"]
    first = agg["points"].get(str(op["per_board_concurrency"])) if op else None
    first = first or next(iter(agg["points"].values()))
    lines += ["", f"Conditions: {conditions_line(first['conditions'])}", ""]
    if op:
        lines.append(
            f"**Operating point: {op['per_board_concurrency']} per board** — the lowest concurrency "
            f"giving ≥ {op['fraction_of_peak_rule']:.0%} of peak ({_f(op['throughput_inf_per_s'])} of "
            f"{_f(op['peak_throughput_inf_per_s'])} inf/s at {op['peak_per_board_concurrency']}/board). "
            "Compare configurations here, not in overload."
        )
    lines += [f"- ⚠ {w}" for w in agg["warnings"]]
    lines += ["", f"![saturation curve](plots/{name}_saturation.png)", ""]
    return lines


def _scaling_md(name: str, agg: dict[str, Any]) -> list[str]:
    lines = [
        f"## Scaling ({name})",
        "",
        "Throughput and efficiency together (efficiency = X(n) / (n · X(1))). Latency percentiles are "
        "POOLED over every sample of every valid repetition; the mean of per-run percentiles is shown "
        "for comparison only (it dilutes the tail).",
        "",
    ]
    rows = []
    for n, g in agg["points"].items():
        p, m = g["latency_pooled_ms"], g["latency_mean_of_runs_ms"]
        rows.append(
            [
                n,
                f"{_f(g['throughput_mean_inf_per_s'])} ± {_f(g['throughput_std_inf_per_s'])}",
                _pct(g["efficiency"]),
                _f(g["speedup_x"], ".2f", "×"),
                _f(g["ideal_throughput_inf_per_s"]),
                _f(p["p50"]),
                _f(p["p95"]),
                _f(p["p99"]),
                _f(p["p99_9"]),
                _f(p["max"]),
                _f(m["p99"]),
                f"{g['conditions']['repetitions_valid']}/{g['conditions']['repetitions_total']}",
            ]
        )
    lines.append(
        _table(
            [
                "boards",
                "throughput inf/s",
                "efficiency",
                "speedup",
                "ideal inf/s",
                "p50 ms",
                "p95 ms",
                "p99 ms",
                "p99.9 ms",
                "max ms",
                "p99 mean-of-runs ms",
                "valid runs",
            ],
            rows,
        )
    )
    for n, g in agg["points"].items():
        lines += ["", f"Conditions at {n} board(s): {conditions_line(g['conditions'])}"]
    lines += [f"- ⚠ {w}" for w in agg["warnings"]]
    lines += ["", "### Per-board share and latency", ""]
    rows = [
        [
            n,
            b,
            _pct(v["share"]),
            v["samples_ok"],
            _f(v["latency_mean_ms"]),
            _f(v["latency_p50_ms"]),
            _f(v["latency_p99_ms"]),
        ]
        for n, g in agg["points"].items()
        for b, v in g["boards"].items()
    ]
    lines.append(_table(["boards", "board", "share", "samples", "mean ms", "p50 ms", "p99 ms"], rows))
    lines += ["", "### Per-stage timing (mean ms; board stages on the board's clock)", ""]
    stage_names = list(next(iter(agg["points"].values()))["stages_ms"]) or []
    rows = [
        [n, *[_f(g["stages_ms"].get(s, {}).get("mean_ms"), ".2f") for s in stage_names]]
        for n, g in agg["points"].items()
    ]
    lines.append(_table(["boards", *stage_names], rows))
    lines += [
        "",
        f"![scaling vs ideal](plots/{name}_scaling.png)",
        "",
        f"![latency CDF per node count](plots/{name}_latency_cdf.png)",
        "",
        f"![per-board latency](plots/{name}_boards.png)",
        "",
    ]
    return lines


def _hetero_md(name: str, agg: dict[str, Any]) -> list[str]:
    lines = [
        f"## Heterogeneity dial ({name})",
        "",
        "One board's CPU clock capped down a ladder; spread = slowest board's latency / fastest's "
        "(pooled per-board mean and p50). Cap 0 = no cap (baseline).",
        "",
    ]
    rows = []
    for policy, rungs in agg["policies"].items():
        for cap, g in rungs.items():
            rows.append(
                [
                    policy,
                    f"{g['cap_board']} @ {cap if cap != '0' else 'none'}",
                    _f(g["spread_mean_latency_x"], ".2f", "×"),
                    _f(g["spread_p50_latency_x"], ".2f", "×"),
                    f"{g['slowest_board'] or NA} / {g['fastest_board'] or NA}",
                    _f(g["throughput_mean_inf_per_s"]),
                    _f(g["latency_pooled_ms"]["p99"]),
                    f"{g['conditions']['repetitions_valid']}/{g['conditions']['repetitions_total']}",
                ]
            )
    lines.append(
        _table(
            [
                "policy",
                "cap MHz",
                "spread (mean)",
                "spread (p50)",
                "slowest / fastest",
                "throughput inf/s",
                "p99 ms",
                "valid runs",
            ],
            rows,
        )
    )
    first = next(iter(next(iter(agg["policies"].values())).values()))
    first = {**first, "conditions": {**first["conditions"], "policy": "per row"}}
    lines += [
        "",
        f"Conditions: {conditions_line(first['conditions'])}",
        "",
        f"![spread vs cap](plots/{name}_spread.png)",
        "",
    ]
    return lines


def _openloop_md(name: str, agg: dict[str, Any]) -> list[str]:
    lines = [f"## Open loop ({name})", "", "Latency from the INTENDED send time.", ""]
    rows = []
    for rate, g in agg["points"].items():
        p = g["latency_pooled_ms"]
        rows.append(
            [
                rate,
                _f(g["throughput_mean_inf_per_s"]),
                _f(p["p50"]),
                _f(p["p99"]),
                _f(p["p99_9"]),
                _f(g["send_lag_p99_ms_max"], ".2f"),
                g["generator_behind_schedule_runs"],
                f"{g['conditions']['repetitions_valid']}/{g['conditions']['repetitions_total']}",
            ]
        )
    lines.append(
        _table(
            [
                "λ inf/s",
                "throughput inf/s",
                "p50 ms",
                "p99 ms",
                "p99.9 ms",
                "send lag p99 ms",
                "runs behind schedule",
                "valid runs",
            ],
            rows,
        )
    )
    first = next(iter(agg["points"].values()))
    lines += ["", f"Conditions: {conditions_line(first['conditions'])}", ""]
    return lines


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
            _f(max(d["temp"]) if d["temp"] else None),
            _f(min(d["freq"]) if d["freq"] else None, ".0f"),
            _f(float(np.median(d["user"])) if d["user"] else None, ".2f"),
            _f(float(np.median(d["sys"])) if d["sys"] else None, ".2f"),
            int(sum(d["n"])),
        ]
        for b, d in sorted(per_board.items())
    ]
    lines.append(
        _table(
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
        f"{_f(manifest.get('frames', {}).get('payload_bytes_mean'), ',.0f')} B",
        f"- runs: {summary['runs_valid']} valid / {summary['runs_total']} total",
    ]
    backends = sorted({r["backend"] for r in summary["runs"]})
    lines.append(f"- backend: **{' / '.join(backends) or NA}**")
    if manifest.get("interrupted"):
        lines.append(f"- ⚠ INTERRUPTED: {manifest['interrupted']} (runs completed before it are kept)")
    for p in manifest.get("restore_problems") or []:
        lines.append(f"- ⚠ NOT RESTORED: {p}")
    lines.append("")
    invalid = [r for r in summary["runs"] if not r["valid"]]
    if invalid:
        lines += ["## Invalid runs (kept, excluded from aggregates)", ""]
        lines.append(
            _table(["run", "reasons"], [[r["run_id"], "<br>".join(r["invalid_reasons"])] for r in invalid])
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
        lines += {"sweep": _sweep_md, "scaling": _scaling_md, "hetero": _hetero_md, "openloop": _openloop_md}[
            agg["kind"]
        ](name, agg)
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
    try:
        plot_all(folder, summary, runs)
    except ImportError:
        (folder / "plots" / "README.txt").write_text(
            "matplotlib is not installed: pip install 'npudure[bench]'\n"
        )


# ---------------------------------------------------------------------------------------------- plots
def plot_all(folder: Path, summary: dict[str, Any], runs: Sequence[Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plots = folder / "plots"
    for name, agg in summary["experiments"].items():
        if agg["kind"] == "sweep":
            _plot_saturation(plt, plots / f"{name}_saturation.png", agg)
        elif agg["kind"] == "scaling":
            _plot_scaling(plt, plots / f"{name}_scaling.png", agg)
            _plot_cdf(
                plt, plots / f"{name}_latency_cdf.png", agg, [r for r in runs if r.spec["series"] == name]
            )
            _plot_boards(plt, plots / f"{name}_boards.png", agg)
        elif agg["kind"] == "hetero":
            _plot_spread(plt, plots / f"{name}_spread.png", agg)
    _plot_telemetry(plt, plots / "telemetry.png", runs)


def _legend(ax: Any) -> None:
    if ax.get_legend_handles_labels()[0]:  # an empty legend only warns
        ax.legend(fontsize=8)


def _backend_title(agg_points: dict[str, Any]) -> str:
    return next(iter(agg_points.values()))["conditions"]["backend"]


def _plot_saturation(plt: Any, path: Path, agg: dict[str, Any]) -> None:
    pts = [(int(c), g) for c, g in agg["points"].items() if g["throughput_mean_inf_per_s"] is not None]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    if pts:
        cs = [c for c, _ in pts]
        ax.errorbar(
            cs,
            [g["throughput_mean_inf_per_s"] for _, g in pts],
            yerr=[g["throughput_std_inf_per_s"] or 0 for _, g in pts],
            marker="o",
            capsize=3,
            label="throughput (mean ± sd)",
        )
        ax2 = ax.twinx()
        ax2.plot(
            cs, [g["latency_pooled_ms"]["p99"] for _, g in pts], "s--", color="tab:red", label="p99 (pooled)"
        )
        ax2.set_ylabel("latency p99 ms (pooled)", color="tab:red")
        op = agg["operating_point"]
        if op:
            ax.axvline(
                op["per_board_concurrency"],
                color="green",
                ls=":",
                label=f"operating point {op['per_board_concurrency']}/board",
            )
            ax.axhline(
                op["fraction_of_peak_rule"] * op["peak_throughput_inf_per_s"],
                color="grey",
                ls="--",
                lw=0.8,
                label=f"{op['fraction_of_peak_rule']:.0%} of peak",
            )
        ax.set_xscale("log", base=2)
        ax.set_xticks(cs, [str(c) for c in cs])
    ax.set_xlabel("concurrency per board")
    ax.set_ylabel("throughput inf/s")
    ax.set_title(f"Saturation curve — {_backend_title(agg['points'])}", fontsize=9)
    handles = [h for a in fig.axes for h in a.get_legend_handles_labels()[0]]
    ax.legend(handles=handles, loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_scaling(plt: Any, path: Path, agg: dict[str, Any]) -> None:
    pts = [(int(n), g) for n, g in agg["points"].items()]
    fig, ax = plt.subplots(figsize=(6, 4.5))
    ns = [n for n, _ in pts]
    xs = [g["throughput_mean_inf_per_s"] for _, g in pts]
    ax.errorbar(
        ns,
        [x if x is not None else np.nan for x in xs],
        yerr=[g["throughput_std_inf_per_s"] or 0 for _, g in pts],
        marker="o",
        capsize=3,
        label="measured",
    )
    ideal = [g["ideal_throughput_inf_per_s"] for _, g in pts]
    if all(v is not None for v in ideal):
        ax.plot(ns, ideal, "k--", lw=1, label="ideal n·X(1)")
    for n, g in pts:
        if g["efficiency"] is not None and g["throughput_mean_inf_per_s"] is not None:
            ax.annotate(
                f"{g['throughput_mean_inf_per_s']:.1f} inf/s\neff {g['efficiency']:.1%}",
                (n, g["throughput_mean_inf_per_s"]),
                textcoords="offset points",
                xytext=(5, -22),
                fontsize=8,
            )
    ax.set_xticks(ns)
    ax.set_xlabel("boards")
    ax.set_ylabel("throughput inf/s")
    ax.set_title(f"Scaling vs ideal — {_backend_title(agg['points'])}", fontsize=9)
    _legend(ax)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_cdf(plt: Any, path: Path, agg: dict[str, Any], runs: Sequence[Any]) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    by_n: dict[int, list[np.ndarray]] = {}
    for r in runs:
        if r.summary["valid"]:
            by_n.setdefault(len(r.spec["boards"]), []).append(r.latencies_ms())
    for n, arrays in sorted(by_n.items()):
        lat = np.sort(np.concatenate(arrays))
        if lat.size:
            ax.plot(lat, np.arange(1, lat.size + 1) / lat.size, label=f"{n} board(s), n={lat.size}")
    ax.set_xlabel("latency ms (pooled over valid repetitions)")
    ax.set_ylabel("fraction of requests")
    for q in (0.5, 0.99):
        ax.axhline(q, color="grey", lw=0.6, ls=":")
    ax.set_title(f"Latency CDF per node count — {_backend_title(agg['points'])}", fontsize=9)
    _legend(ax)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_boards(plt: Any, path: Path, agg: dict[str, Any]) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    points = list(agg["points"].items())
    width = 0.8 / max(1, len(points))
    all_boards = sorted({b for _, g in points for b in g["boards"]})
    for k, (n, g) in enumerate(points):
        xs = np.arange(len(all_boards)) + k * width
        ax.bar(
            xs,
            [g["boards"].get(b, {}).get("latency_mean_ms") or 0 for b in all_boards],
            width,
            label=f"{n} board(s)",
        )
    ax.set_xticks(np.arange(len(all_boards)) + 0.4 - width / 2, all_boards)
    ax.set_ylabel("mean latency ms (requests served by the board)")
    ax.set_title(f"Per-board latency at each node count — {_backend_title(agg['points'])}", fontsize=9)
    _legend(ax)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_spread(plt: Any, path: Path, agg: dict[str, Any]) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for policy, rungs in agg["policies"].items():
        labels = ["none" if c == "0" else c for c in rungs]  # ladder order: baseline, then down
        values = [g["spread_mean_latency_x"] for g in rungs.values()]
        ax.plot(labels, [v if v is not None else np.nan for v in values], marker="o", label=policy)
    ax.axhline(1.0, color="grey", lw=0.6)
    ax.set_xlabel("CPU cap on one board, MHz (none = baseline)")
    ax.set_ylabel("per-board latency spread (slowest/fastest mean)")
    first = next(iter(next(iter(agg["policies"].values())).values()))
    ax.set_title(
        f"Heterogeneity dial ({first['cap_board']} capped) — {first['conditions']['backend']}", fontsize=9
    )
    _legend(ax)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _telemetry_series(runs: Sequence[Any]) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """Per board: (seconds since the first run, value) for max temp, min CPU clock, NPU clock, CPU cap and
    the agent process's CPU use (% of one core, from consecutive direct samples of the same boot)."""
    origin = min(float(r.meta["t0_unix_s"]) for r in runs)
    series: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for r in runs:
        base = float(r.meta["t0_unix_s"]) - origin
        last: dict[str, tuple[float, float, str]] = {}
        for row in r.telemetry:
            t = base + float(row["t_s"])
            board = str(row["board"])
            d = series.setdefault(board, {"temp": [], "cpu": [], "npu": [], "cap": [], "proc": []})
            temps = [float(v) for k, v in row.items() if k.startswith("thermal_") and v not in (None, "")]
            freqs = [float(v) for k, v in row.items() if k.startswith("cpu_freq_") and v not in (None, "")]
            if temps:
                d["temp"].append((t, max(temps)))
            if freqs:
                d["cpu"].append((t, min(freqs)))
            if row.get("npu_freq_mhz") not in (None, ""):
                d["npu"].append((t, float(row["npu_freq_mhz"])))
            if row.get("cpu_cap_mhz") not in (None, ""):
                d["cap"].append((t, float(row["cpu_cap_mhz"])))
            if row.get("source") == "node" and row.get("process_cpu_user_s") not in (None, ""):
                cpu_s = float(row["process_cpu_user_s"]) + float(row["process_cpu_system_s"])
                prev = last.get(board)
                if prev and prev[2] == row.get("boot_id") and t > prev[0]:
                    d["proc"].append((t, 100 * (cpu_s - prev[1]) / (t - prev[0])))
                last[board] = (t, cpu_s, str(row.get("boot_id")))
    return series


def _plot_telemetry(plt: Any, path: Path, runs: Sequence[Any]) -> None:
    panels = (
        ("temp", "max temp °C"),
        ("cpu", "min CPU clock MHz"),
        ("npu", "NPU clock MHz"),
        ("cap", "CPU cap MHz (0 = none)"),
        ("proc", "agent CPU % of a core"),
    )
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 9), sharex=True)
    if not runs:
        fig.savefig(path, dpi=100)
        plt.close(fig)
        return
    series = _telemetry_series(runs)
    origin = min(float(r.meta["t0_unix_s"]) for r in runs)
    for r in runs:
        base = float(r.meta["t0_unix_s"]) - origin
        for ax in axes:
            ax.axvspan(base + r.window[0], base + r.window[1], color="0.93", lw=0)
    for ax, (key, label) in zip(axes, panels, strict=True):
        for board, d in sorted(series.items()):
            if d[key]:
                t, v = zip(*d[key], strict=True)
                ax.plot(t, v, ".-", ms=2, lw=0.8, label=board)
        ax.set_ylabel(label, fontsize=8)
        if not any(d[key] for d in series.values()):
            ax.text(0.5, 0.5, "not reported by the boards", transform=ax.transAxes, ha="center", color="grey")
        else:
            ax.legend(fontsize=7, ncol=4, loc="upper right")
    axes[-1].set_xlabel("seconds since the first run started (grey: measurement windows)")
    axes[0].set_title("Telemetry sampled every second during load", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------- terminal
def summary_text(summary: dict[str, Any], folder: Path) -> str:
    out = [
        f"Results: {folder}",
        f"Runs: {summary['runs_valid']} valid / {summary['runs_total']} total"
        + (
            f" (INVALID, kept and marked: {', '.join(summary['runs_invalid'])})"
            if summary["runs_invalid"]
            else ""
        ),
    ]
    for name, agg in summary["experiments"].items():
        if agg["kind"] == "sweep":
            op = agg["operating_point"]
            first = agg["points"].get(str(op["per_board_concurrency"])) if op else None
            first = first or next(iter(agg["points"].values()))
            out.append(
                f"[{name}] operating point: "
                + (
                    f"{op['per_board_concurrency']}/board → {_f(op['throughput_inf_per_s'])} inf/s "
                    f"(peak {_f(op['peak_throughput_inf_per_s'])} "
                    f"at {op['peak_per_board_concurrency']}/board)"
                    if op
                    else "none (no valid runs)"
                )
            )
            out.append(f"  conditions: {conditions_line(first['conditions'])}")
            out += [f"  warning: {w}" for w in agg["warnings"]]
        elif agg["kind"] == "scaling":
            out.append(f"[{name}] throughput and efficiency (X(n)/(n·X(1))), latency pooled:")
            for n, g in agg["points"].items():
                p = g["latency_pooled_ms"]
                out.append(
                    f"  {n} board(s): {_f(g['throughput_mean_inf_per_s'])} inf/s, efficiency "
                    f"{_pct(g['efficiency'])} | p50 {_f(p['p50'])} p95 {_f(p['p95'])} p99 {_f(p['p99'])} "
                    f"p99.9 {_f(p['p99_9'])} max {_f(p['max'])} ms | "
                    f"{g['conditions']['repetitions_valid']}/{g['conditions']['repetitions_total']} valid"
                )
            last = list(agg["points"].values())[-1]
            out.append(f"  conditions: {conditions_line(last['conditions'])}")
            out += [f"  warning: {w}" for w in agg["warnings"]]
        elif agg["kind"] == "hetero":
            out.append(f"[{name}] per-board latency spread (slowest/fastest mean) by CPU cap:")
            for policy, rungs in agg["policies"].items():
                cells = [
                    f"{'none' if c == '0' else c}: {_f(g['spread_mean_latency_x'], '.2f', '×')}"
                    for c, g in rungs.items()
                ]
                out.append(f"  {policy:<22} " + "  ".join(cells))
        elif agg["kind"] == "openloop":
            out.append(f"[{name}] open loop (latency from intended send time):")
            for rate, g in agg["points"].items():
                p = g["latency_pooled_ms"]
                out.append(
                    f"  λ={rate}/s: {_f(g['throughput_mean_inf_per_s'])} inf/s, p50 {_f(p['p50'])} "
                    f"p99 {_f(p['p99'])} ms, send lag p99 {_f(g['send_lag_p99_ms_max'], '.2f')} ms"
                )
    out.append(f"Report: {folder / 'report.md'}")
    return "\n".join(out)
