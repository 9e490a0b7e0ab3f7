"""Capacity of a heterogeneous shelf: with one board capped (816 MHz by default), each board is measured
ALONE (its capacity), then all boards together under each policy. The figure is the delivered
throughput as a fraction of the summed capacities — what a policy leaves on the table when the boards
differ — with the per-board latency spread (slowest board's mean / fastest's) beside it (issue #11).

Every run carries the same cap, so the capped board's capacity is measured capped. In proxyless mode
the scheduler's policy does not route anything: the boards together run once, balanced by the client.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from npudure_workshop.bench import fmt, stats
from npudure_workshop.bench.defaults import CAPACITY_CAP_MHZ, CAPACITY_POLICIES
from npudure_workshop.bench.experiments.base import Experiment, Plan, PlanContext, Rows
from npudure_workshop.bench.experiments.hetero import CLIENT, cap_board
from npudure_workshop.bench.fmt import NA, conditions_line, f, pct, section, table, valid_runs
from npudure_workshop.bench.groups import aggregate_group, board_cols, group_by, group_cols
from npudure_workshop.bench.plotting import save
from npudure_workshop.bench.runs import RunData, percent


def _label(r: RunData) -> str:
    return r.spec.get("policy") or CLIENT


class Capacity(Experiment):
    kind = "capacity"

    def plan(
        self,
        ctx: PlanContext,
        per_board: int = 1,
        policies: Sequence[str] = CAPACITY_POLICIES,
        cap_mhz: int = CAPACITY_CAP_MHZ,
        board: str | None = None,
        repetitions: int = 1,
    ) -> Plan:
        boards = ctx.boards
        victim = cap_board(boards, board, "the capacity experiment")
        if cap_mhz <= 0:
            raise ValueError("the capacity experiment needs a CPU cap in MHz above 0, e.g. 816")
        together: list[str | None] = list(policies) if ctx.via == "scheduler" else [None]
        if not together:
            raise ValueError("the capacity experiment needs at least one policy, e.g. round_robin,ect")
        caps = {victim: cap_mhz}
        plan = Plan(
            f"{ctx.series} ({victim} capped at {cap_mhz} MHz; each board alone, then together: "
            f"{', '.join(p or CLIENT for p in together)})"
        )
        for rep in range(repetitions):
            for b in stats.alternating_order(list(boards), rep):
                plan.specs.append(
                    self.closed_spec(
                        ctx,
                        f"{ctx.series}-alone-{b}-r{rep}",
                        rep,
                        (b,),
                        per_board,
                        caps=caps,
                        cap_board=victim,
                    )
                )
            for policy in stats.alternating_order(together, rep):
                plan.specs.append(
                    self.closed_spec(
                        ctx,
                        f"{ctx.series}-{policy or 'client'}-r{rep}",
                        rep,
                        boards,
                        per_board,
                        policy=policy,
                        caps=caps,
                        cap_board=victim,
                    )
                )
        return plan

    def aggregate(self, runs: Sequence[RunData]) -> dict[str, Any]:
        first = runs[0].spec
        shelf = max((r.spec["boards"] for r in runs), key=len)  # every board of the experiment
        alone_runs = [r for r in runs if len(r.spec["boards"]) == 1]
        together_runs = [r for r in runs if len(r.spec["boards"]) > 1]
        alone = {
            b: aggregate_group(rs) for b, rs in group_by(alone_runs, lambda r: r.spec["boards"][0]).items()
        }
        warnings = []
        missing = [b for b in shelf if (alone.get(b) or {}).get("throughput_mean_inf_per_s") is None]
        if missing:
            warnings.append(f"no valid run of {', '.join(missing)} alone: the summed capacity is unknown")
        summed = None if missing else sum(alone[b]["throughput_mean_inf_per_s"] for b in shelf)
        policies = {}
        for label, rs in group_by(together_runs, _label).items():
            g = aggregate_group(rs)
            x = g["throughput_mean_inf_per_s"]
            g["fraction_of_capacity"] = x / summed if (x is not None and summed) else None
            means = {b: v["latency_mean_ms"] for b, v in g["boards"].items()}
            g["spread_mean_latency_x"], g["slowest_board"], g["fastest_board"] = stats.spread(means)
            policies[label] = g
        return {
            "kind": self.kind,
            "cap_board": first["cap_board"],
            "cap_mhz": (first.get("caps") or {}).get(first["cap_board"]),
            "alone": alone,
            "capacity_sum_inf_per_s": summed,
            "policies": policies,
            "warnings": warnings,
        }

    def tables(self, name: str, agg: dict[str, Any]) -> dict[str, Rows]:
        rows = [
            {
                "policy": label,
                "cap_board": agg["cap_board"],
                "cap_mhz": agg["cap_mhz"],
                "capacity_sum_inf_per_s": agg["capacity_sum_inf_per_s"],
                "fraction_of_capacity_pct": percent(g["fraction_of_capacity"]),
                "spread_mean_latency_x": g["spread_mean_latency_x"],
                "slowest_board": g["slowest_board"],
                "fastest_board": g["fastest_board"],
                **group_cols(g),
            }
            for label, g in agg["policies"].items()
        ]
        board_rows = [
            {
                "policy": "alone",
                "capacity_inf_per_s": g["throughput_mean_inf_per_s"],
                **board_cols(b, g["boards"][b]),
            }
            for b, g in agg["alone"].items()
            if b in g["boards"]
        ]
        board_rows += [
            {"policy": label, "capacity_inf_per_s": None, **board_cols(b, v)}
            for label, g in agg["policies"].items()
            for b, v in g["boards"].items()
        ]
        return {f"{name}.csv": rows, f"{name}_boards.csv": board_rows}

    def markdown(self, name: str, agg: dict[str, Any]) -> list[str]:
        lines = section(
            "Capacity of a heterogeneous shelf",
            name,
            f"{agg['cap_board']} capped at {agg['cap_mhz']} MHz in every run. Capacity = a board's "
            "throughput ALONE; the fraction is the throughput of all boards together over the summed "
            "capacities; spread = slowest board's mean latency / fastest's.",
        )
        rows = [
            [b, f(g["throughput_mean_inf_per_s"]), f(g["latency_pooled_ms"]["p50"]), valid_runs(g)]
            for b, g in agg["alone"].items()
        ]
        lines.append(table(["board (alone)", "capacity inf/s", "p50 ms", "valid runs"], rows))
        lines += ["", f"Summed capacity: {f(agg['capacity_sum_inf_per_s'])} inf/s", ""]
        rows = [
            [
                label,
                f(g["throughput_mean_inf_per_s"]),
                pct(g["fraction_of_capacity"]),
                f(g["spread_mean_latency_x"], ".2f", "×"),
                f"{g['slowest_board'] or NA} / {g['fastest_board'] or NA}",
                f(g["latency_pooled_ms"]["p99"]),
                valid_runs(g),
            ]
            for label, g in agg["policies"].items()
        ]
        header = [
            "policy",
            "together inf/s",
            "of summed capacity",
            "spread (mean)",
            "slowest / fastest",
            "p99 ms",
            "valid runs",
        ]
        lines.append(table(header, rows))
        if agg["policies"]:
            first = next(iter(agg["policies"].values()))
            cond = {**first["conditions"], "policy": "per row"}
            lines += ["", f"Conditions (together): {conditions_line(cond)}"]
        lines += fmt.warning_items(agg["warnings"])
        lines += fmt.figures(name, [("fraction of summed capacity", "capacity")])
        return lines

    def summary_lines(self, name: str, agg: dict[str, Any]) -> list[str]:
        caps = ", ".join(f"{b} {f(g['throughput_mean_inf_per_s'])}" for b, g in agg["alone"].items())
        out = [
            f"[{name}] {agg['cap_board']} capped at {agg['cap_mhz']} MHz; alone: {caps} "
            f"(sum {f(agg['capacity_sum_inf_per_s'])} inf/s); together:"
        ]
        for label, g in agg["policies"].items():
            out.append(
                f"  {label:<22} {f(g['throughput_mean_inf_per_s'])} inf/s = {pct(g['fraction_of_capacity'])} "
                f"of summed capacity, spread {f(g['spread_mean_latency_x'], '.2f', '×')} | "
                f"{valid_runs(g)} valid"
            )
        if agg["policies"]:
            first = next(iter(agg["policies"].values()))
            out.append(f"  conditions: {conditions_line({**first['conditions'], 'policy': 'per row'})}")
        return out + fmt.warning_lines(agg["warnings"])

    def plots(self, plt: Any, folder: Path, name: str, agg: dict[str, Any], runs: Sequence[RunData]) -> None:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        labels = list(agg["policies"])
        values = [(g["fraction_of_capacity"] or 0) * 100 for g in agg["policies"].values()]
        ax.bar(labels, values)
        ax.axhline(100, color="grey", lw=0.6, ls="--")
        ax.set_ylabel("delivered throughput, % of summed per-board capacity")
        backend = next(iter(agg["alone"].values()))["conditions"]["backend"] if agg["alone"] else ""
        ax.set_title(f"{agg['cap_board']} capped at {agg['cap_mhz']} MHz — {backend}", fontsize=9)
        save(plt, fig, folder / f"{name}_capacity.png")
