"""Concurrency sweep → saturation curve → operating point.

Concurrency is given PER BOARD and multiplied by the number of boards (the reference's "c12 per node").
The operating point is the lowest per-board concurrency reaching 98% of the peak mean throughput;
everything else (scaling, policy comparisons, the CPU-cap ladder) is measured there, never in overload —
the reference once saw a 46% tail penalty flip to an 18.8% gain when it re-measured at the operating
point instead of at c32. Candidates run forward on even repetitions and reversed on odd ones, so slow
drift (heat, caches) does not masquerade as a trend in concurrency.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from npudure_workshop.bench import fmt, stats
from npudure_workshop.bench.experiments.base import Plan, PlanContext, PointExperiment
from npudure_workshop.bench.fmt import LatencyColumns, conditions_line, f, pct, section, table, valid_runs
from npudure_workshop.bench.groups import aggregate_group, group_by
from npudure_workshop.bench.plotting import backend_title, save
from npudure_workshop.bench.runs import RunData

LATENCY_COLUMNS = LatencyColumns(("p50", "p99", "p99_9"))


def operating_concurrency(sweep: dict[str, Any]) -> int | None:
    op = sweep.get("operating_point")
    return int(op["per_board_concurrency"]) if op else None


def _op_group(agg: dict[str, Any]) -> dict[str, Any]:
    op = agg["operating_point"]
    first = agg["points"].get(str(op["per_board_concurrency"])) if op else None
    return first or next(iter(agg["points"].values()))


class Sweep(PointExperiment):
    kind = "sweep"
    point_key = "per_board_concurrency"
    point_type = int

    def plan(
        self,
        ctx: PlanContext,
        per_board: Sequence[int] = (),
        repetitions: int = 1,
        boards: Sequence[str] | None = None,
    ) -> Plan:
        if not per_board or any(c < 1 for c in per_board):
            raise ValueError("sweep concurrencies must be positive integers, e.g. 1,2,4,8")
        chosen = tuple(boards or ctx.boards)
        n = len(chosen)
        candidates = sorted(set(per_board))
        plan = Plan(f"{ctx.series} ({n} boards, per-board concurrency {candidates})")
        for rep, c in stats.alternating_repetitions(candidates, repetitions):
            plan.specs.append(self.closed_spec(ctx, f"{ctx.series}-c{c:03d}-r{rep}", rep, chosen, c))
        return plan

    def aggregate(self, runs: Sequence[RunData]) -> dict[str, Any]:
        groups = {
            c: aggregate_group(rs)
            for c, rs in group_by(runs, lambda r: r.spec["per_board_concurrency"]).items()
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
            "kind": self.kind,
            "points": {str(c): g for c, g in groups.items()},
            "operating_point": op.as_dict() if op else None,
            "warnings": warnings,
        }

    def point_columns(self, g: dict[str, Any]) -> dict[str, Any]:
        return {"fraction_of_peak": g["fraction_of_peak"], "is_operating_point": g["is_operating_point"]}

    def markdown(self, name: str, agg: dict[str, Any]) -> list[str]:
        lines = section("Saturation curve", name)
        rows = []
        for c, g in agg["points"].items():
            p = g["latency_pooled_ms"]
            rows.append(
                [
                    c + (" **(operating point)**" if g["is_operating_point"] else ""),
                    g["conditions"]["concurrency_total"],
                    f"{f(g['throughput_mean_inf_per_s'])} ± {f(g['throughput_std_inf_per_s'])}",
                    pct(g["fraction_of_peak"]),
                    *LATENCY_COLUMNS.cells(p),
                    valid_runs(g),
                ]
            )
        header = [
            "per-board concurrency",
            "total",
            "throughput inf/s (mean ± sd)",
            "of peak",
            *LATENCY_COLUMNS.header,
            "valid runs",
        ]
        lines.append(table(header, rows))
        op = agg["operating_point"]
        lines += ["", f"Conditions: {conditions_line(_op_group(agg)['conditions'])}", ""]
        if op:
            lines.append(
                f"**Operating point: {op['per_board_concurrency']} per board** — the lowest concurrency "
                f"giving ≥ {op['fraction_of_peak_rule']:.0%} of peak ({f(op['throughput_inf_per_s'])} of "
                f"{f(op['peak_throughput_inf_per_s'])} inf/s at {op['peak_per_board_concurrency']}/board). "
                "Compare configurations here, not in overload."
            )
        lines += fmt.warning_items(agg["warnings"])
        lines += fmt.figures(name, [("saturation curve", "saturation")])
        return lines

    def summary_lines(self, name: str, agg: dict[str, Any]) -> list[str]:
        op = agg["operating_point"]
        out = [
            f"[{name}] operating point: "
            + (
                f"{op['per_board_concurrency']}/board → {f(op['throughput_inf_per_s'])} inf/s "
                f"(peak {f(op['peak_throughput_inf_per_s'])} "
                f"at {op['peak_per_board_concurrency']}/board)"
                if op
                else "none (no valid runs)"
            ),
            f"  conditions: {conditions_line(_op_group(agg)['conditions'])}",
        ]
        return out + fmt.warning_lines(agg["warnings"])

    def plots(self, plt: Any, folder: Path, name: str, agg: dict[str, Any], runs: Sequence[RunData]) -> None:
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
                cs,
                [g["latency_pooled_ms"]["p99"] for _, g in pts],
                "s--",
                color="tab:red",
                label="p99 (pooled)",
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
        ax.set_title(f"Saturation curve — {backend_title(agg['points'])}", fontsize=9)
        handles = [h for a in fig.axes for h in a.get_legend_handles_labels()[0]]
        ax.legend(handles=handles, loc="lower right", fontsize=8)
        save(plt, fig, folder / f"{name}_saturation.png")
