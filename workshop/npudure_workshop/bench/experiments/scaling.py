"""Scaling: 1..N boards chosen with SetActiveNodes (no redeploy), at the operating point.

Total concurrency is the per-board operating point × n, so each board sees the same load at every n.
Efficiency = X(n) / (n · X(1)); it is always reported next to throughput, with the conditions: the
reference's tuned transport raised throughput 13% while efficiency FELL from 98.9% to 95.3% — either
figure alone hides the trade-off. Node counts alternate forward/reverse between repetitions.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from npudure_workshop.bench import fmt, stats
from npudure_workshop.bench.experiments.base import Plan, PlanContext, PointExperiment
from npudure_workshop.bench.fmt import LatencyColumns, conditions_line, f, pct, section, table, valid_runs
from npudure_workshop.bench.groups import aggregate_group, group_by
from npudure_workshop.bench.plotting import backend_title, legend, save
from npudure_workshop.bench.runs import RunData, percent

LATENCY_COLUMNS = LatencyColumns(("p50", "p95", "p99", "p99_9", "max"))


class Scaling(PointExperiment):
    kind = "scaling"
    point_key = "n_boards"
    point_type = int

    def plan(
        self, ctx: PlanContext, per_board: int = 1, repetitions: int = 3, boards_max: int | None = None
    ) -> Plan:
        boards = ctx.boards[: boards_max or len(ctx.boards)]
        if not boards:
            raise ValueError("no boards to scale over")
        counts = list(range(1, len(boards) + 1))
        plan = Plan(f"{ctx.series} (1..{len(boards)} boards at {per_board}/board)")
        for rep, n in stats.alternating_repetitions(counts, repetitions):
            plan.specs.append(self.closed_spec(ctx, f"{ctx.series}-n{n}-r{rep}", rep, boards[:n], per_board))
        return plan

    def aggregate(self, runs: Sequence[RunData]) -> dict[str, Any]:
        groups = {n: aggregate_group(rs) for n, rs in group_by(runs, lambda r: len(r.spec["boards"])).items()}
        x1 = groups[1]["throughput_mean_inf_per_s"] if 1 in groups else None
        warnings = []
        if x1 is None:
            warnings.append("no valid 1-board run: efficiency cannot be computed")
        for n, g in groups.items():
            x = g["throughput_mean_inf_per_s"]
            g["efficiency"] = stats.efficiency(x, n, x1)
            g["ideal_throughput_inf_per_s"] = n * x1 if x1 is not None else None
            g["speedup_x"] = x / x1 if (x is not None and x1) else None
        return {"kind": self.kind, "points": {str(n): g for n, g in groups.items()}, "warnings": warnings}

    def point_columns(self, g: dict[str, Any]) -> dict[str, Any]:
        return {
            "efficiency_pct": percent(g["efficiency"]),
            "ideal_throughput_inf_per_s": g["ideal_throughput_inf_per_s"],
            "speedup_x": g["speedup_x"],
        }

    def markdown(self, name: str, agg: dict[str, Any]) -> list[str]:
        lines = section(
            "Scaling",
            name,
            "Throughput and efficiency together (efficiency = X(n) / (n · X(1))). Latency percentiles are "
            "POOLED over every sample of every valid repetition; the mean of per-run percentiles is shown "
            "for comparison only (it dilutes the tail).",
        )
        rows = []
        for n, g in agg["points"].items():
            p, m = g["latency_pooled_ms"], g["latency_mean_of_runs_ms"]
            rows.append(
                [
                    n,
                    f"{f(g['throughput_mean_inf_per_s'])} ± {f(g['throughput_std_inf_per_s'])}",
                    pct(g["efficiency"]),
                    f(g["speedup_x"], ".2f", "×"),
                    f(g["ideal_throughput_inf_per_s"]),
                    *LATENCY_COLUMNS.cells(p),
                    f(m["p99"]),
                    valid_runs(g),
                ]
            )
        header = [
            "boards",
            "throughput inf/s",
            "efficiency",
            "speedup",
            "ideal inf/s",
            *LATENCY_COLUMNS.header,
            "p99 mean-of-runs ms",
            "valid runs",
        ]
        lines.append(table(header, rows))
        for n, g in agg["points"].items():
            lines += ["", f"Conditions at {n} board(s): {conditions_line(g['conditions'])}"]
        lines += fmt.warning_items(agg["warnings"])
        lines += ["", "### Per-board share and latency", ""]
        rows = [
            [
                n,
                b,
                pct(v["share"]),
                v["samples_ok"],
                f(v["latency_mean_ms"]),
                f(v["latency_p50_ms"]),
                f(v["latency_p99_ms"]),
            ]
            for n, g in agg["points"].items()
            for b, v in g["boards"].items()
        ]
        lines.append(table(["boards", "board", "share", "samples", "mean ms", "p50 ms", "p99 ms"], rows))
        lines += ["", "### Per-stage timing (mean ms; board stages on the board's clock)", ""]
        stage_names = list(next(iter(agg["points"].values()))["stages_ms"]) or []
        rows = [
            [n, *[f(g["stages_ms"].get(s, {}).get("mean_ms"), ".2f") for s in stage_names]]
            for n, g in agg["points"].items()
        ]
        lines.append(table(["boards", *stage_names], rows))
        lines += fmt.figures(
            name,
            [
                ("scaling vs ideal", "scaling"),
                ("latency CDF per node count", "latency_cdf"),
                ("per-board latency", "boards"),
            ],
        )
        return lines

    def summary_lines(self, name: str, agg: dict[str, Any]) -> list[str]:
        out = [f"[{name}] throughput and efficiency (X(n)/(n·X(1))), latency pooled:"]
        for n, g in agg["points"].items():
            out.append(
                f"  {n} board(s): {f(g['throughput_mean_inf_per_s'])} inf/s, efficiency "
                f"{pct(g['efficiency'])} | {LATENCY_COLUMNS.inline(g['latency_pooled_ms'])} | "
                f"{valid_runs(g)} valid"
            )
        last = list(agg["points"].values())[-1]
        out.append(f"  conditions: {conditions_line(last['conditions'])}")
        return out + fmt.warning_lines(agg["warnings"])

    def plots(self, plt: Any, folder: Path, name: str, agg: dict[str, Any], runs: Sequence[RunData]) -> None:
        _plot_scaling(plt, folder / f"{name}_scaling.png", agg)
        _plot_cdf(plt, folder / f"{name}_latency_cdf.png", agg, runs)
        _plot_boards(plt, folder / f"{name}_boards.png", agg)


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
    ax.set_title(f"Scaling vs ideal — {backend_title(agg['points'])}", fontsize=9)
    legend(ax)
    save(plt, fig, path)


def _plot_cdf(plt: Any, path: Path, agg: dict[str, Any], runs: Sequence[RunData]) -> None:
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
    ax.set_title(f"Latency CDF per node count — {backend_title(agg['points'])}", fontsize=9)
    legend(ax)
    save(plt, fig, path)


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
    ax.set_title(f"Per-board latency at each node count — {backend_title(agg['points'])}", fontsize=9)
    legend(ax)
    save(plt, fig, path)
