"""The heterogeneity dial: cap one board's CPU clock down a ladder and measure per-board latency spread.

Heat does not reproduce heterogeneity (three boards throttling together show none; the reference saw
1.10x to 2.40x spread at the same 86 °C); the clock cap does, deterministically — 816 MHz reproduced
its fanless S0-A run within 6 ms. For each policy the ladder starts with no cap (the baseline), then
each rung; spread = slowest board's mean (and p50) latency / the fastest's. The cap and the policy are
restored on exit, whatever happens (the session's ClusterGuard).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from npudure_workshop.bench import fmt, stats
from npudure_workshop.bench.defaults import QUICK_LADDER_MHZ
from npudure_workshop.bench.experiments.base import Experiment, Plan, PlanContext, Rows, require_active
from npudure_workshop.bench.fmt import NA, conditions_line, f, section, table, valid_runs
from npudure_workshop.bench.groups import aggregate_group, board_cols, group_by, group_cols
from npudure_workshop.bench.plotting import legend, save
from npudure_workshop.bench.runs import RunData

# The label of runs whose spec sets no scheduler policy (proxyless: the client balances).
CLIENT = "client-side"


def cap_board(boards: Sequence[str], board: str | None, what: str = "the heterogeneity dial") -> str:
    """The board to cap: ``board`` if given and active, else the first active board."""
    if len(boards) < 2:
        raise ValueError(f"{what} needs at least 2 boards (a spread is between boards)")
    require_active(boards, board, "--hetero-board")
    return board or boards[0]


class Hetero(Experiment):
    kind = "hetero"

    def plan(
        self,
        ctx: PlanContext,
        per_board: int = 1,
        ladder: Sequence[int] = QUICK_LADDER_MHZ,
        policies: Sequence[str | None] = (),
        board: str | None = None,
        repetitions: int = 1,
    ) -> Plan:
        boards = ctx.boards
        victim = cap_board(boards, board)
        rungs = [0, *[int(m) for m in ladder if int(m) > 0]]  # 0 = no cap: the baseline
        if not policies:
            raise ValueError("the heterogeneity dial needs at least one policy, e.g. round_robin,ect")
        names = [p or CLIENT for p in policies]
        plan = Plan(f"{ctx.series} (cap {victim}: {rungs[1:]} MHz; policies {names})")
        for rep, policy in stats.alternating_repetitions(list(policies), repetitions):
            for mhz in stats.alternating_order(rungs, rep):
                plan.specs.append(
                    self.closed_spec(
                        ctx,
                        f"{ctx.series}-{policy or 'client'}-cap{mhz}-r{rep}",
                        rep,
                        boards,
                        per_board,
                        policy=policy,
                        caps={victim: mhz},
                        cap_board=victim,
                    )
                )
        return plan

    def aggregate(self, runs: Sequence[RunData]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for policy, by_policy in group_by(runs, lambda r: r.spec.get("policy") or CLIENT).items():
            rungs = {}
            groups = group_by(by_policy, lambda r: (r.spec.get("caps") or {}).get(r.spec["cap_board"], 0))
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
        return {"kind": self.kind, "policies": out, "warnings": []}

    def tables(self, name: str, agg: dict[str, Any]) -> dict[str, Rows]:
        rows, board_rows = [], []
        for policy, rungs in agg["policies"].items():
            for g in rungs.values():
                rows.append(
                    {
                        "policy": policy,
                        "cap_board": g["cap_board"],
                        "cap_mhz": g["cap_mhz"],
                        **group_cols(g),
                        "spread_mean_latency_x": g["spread_mean_latency_x"],
                        "spread_p50_latency_x": g["spread_p50_latency_x"],
                        "slowest_board": g["slowest_board"],
                        "fastest_board": g["fastest_board"],
                    }
                )
                board_rows += [
                    {"policy": policy, "cap_mhz": g["cap_mhz"], **board_cols(b, v)}
                    for b, v in g["boards"].items()
                ]
        return {f"{name}.csv": rows, f"{name}_boards.csv": board_rows}

    def markdown(self, name: str, agg: dict[str, Any]) -> list[str]:
        lines = section(
            "Heterogeneity dial",
            name,
            "One board's CPU clock capped down a ladder; spread = slowest board's latency / fastest's "
            "(pooled per-board mean and p50). Cap 0 = no cap (baseline).",
        )
        rows = []
        for policy, rungs in agg["policies"].items():
            for cap, g in rungs.items():
                rows.append(
                    [
                        policy,
                        f"{g['cap_board']} @ {cap if cap != '0' else 'none'}",
                        f(g["spread_mean_latency_x"], ".2f", "×"),
                        f(g["spread_p50_latency_x"], ".2f", "×"),
                        f"{g['slowest_board'] or NA} / {g['fastest_board'] or NA}",
                        f(g["throughput_mean_inf_per_s"]),
                        f(g["latency_pooled_ms"]["p99"]),
                        valid_runs(g),
                    ]
                )
        header = [
            "policy",
            "cap MHz",
            "spread (mean)",
            "spread (p50)",
            "slowest / fastest",
            "throughput inf/s",
            "p99 ms",
            "valid runs",
        ]
        lines.append(table(header, rows))
        first = _first(agg)
        cond = {**first["conditions"], "policy": "per row"}
        lines += [
            "",
            f"Conditions: {conditions_line(cond)}",
            *fmt.figures(name, [("spread vs cap", "spread")]),
        ]
        return lines

    def summary_lines(self, name: str, agg: dict[str, Any]) -> list[str]:
        out = [f"[{name}] per-board latency spread (slowest/fastest mean) by CPU cap:"]
        for policy, rungs in agg["policies"].items():
            cells = [
                f"{'none' if c == '0' else c}: {f(g['spread_mean_latency_x'], '.2f', '×')}"
                for c, g in rungs.items()
            ]
            out.append(f"  {policy:<22} " + "  ".join(cells))
        return out

    def plots(self, plt: Any, folder: Path, name: str, agg: dict[str, Any], runs: Sequence[RunData]) -> None:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for policy, rungs in agg["policies"].items():
            labels = ["none" if c == "0" else c for c in rungs]  # ladder order: baseline, then down
            values = [g["spread_mean_latency_x"] for g in rungs.values()]
            ax.plot(labels, [v if v is not None else np.nan for v in values], marker="o", label=policy)
        ax.axhline(1.0, color="grey", lw=0.6)
        ax.set_xlabel("CPU cap on one board, MHz (none = baseline)")
        ax.set_ylabel("per-board latency spread (slowest/fastest mean)")
        first = _first(agg)
        ax.set_title(
            f"Heterogeneity dial ({first['cap_board']} capped) — {first['conditions']['backend']}", fontsize=9
        )
        legend(ax)
        save(plt, fig, folder / f"{name}_spread.png")


def _first(agg: dict[str, Any]) -> dict[str, Any]:
    return next(iter(next(iter(agg["policies"].values())).values()))
