"""The PNG plots: each experiment's own (npudure_workshop.bench.experiments), and telemetry over time.

matplotlib comes with the ``controller`` extra (the boards do without it); imported only when plotting.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from npudure import extras
from npudure_workshop.bench import experiments
from npudure_workshop.bench.runs import RunData


def plot_all(folder: Path, summary: dict[str, Any], runs: Sequence[RunData]) -> None:
    matplotlib = extras.require("matplotlib", "the bench report's plots")
    matplotlib.use("Agg")
    plt = extras.require("matplotlib.pyplot", "the bench report's plots")

    plots = folder / "plots"
    for name, agg in summary["experiments"].items():
        series_runs = [r for r in runs if r.spec["series"] == name]
        experiments.get(agg["kind"]).plots(plt, plots, name, agg, series_runs)
    _plot_telemetry(plt, plots / "telemetry.png", runs)


def _telemetry_series(runs: Sequence[RunData]) -> dict[str, dict[str, list[tuple[float, float]]]]:
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


def _plot_telemetry(plt: Any, path: Path, runs: Sequence[RunData]) -> None:
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
