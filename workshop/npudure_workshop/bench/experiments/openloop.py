"""Open loop: requests at rate λ (constant or Poisson, fixed seed), latency from the intended send time.

A closed loop slows down when the cluster does and so never sees a queue build; an open loop keeps
sending on schedule, as cameras do. Lateness of the generator itself is measured and flagged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from npudure_workshop.bench import stats
from npudure_workshop.bench.experiments.base import Plan, PlanContext, PointExperiment
from npudure_workshop.bench.fmt import LatencyColumns, conditions_line, f, section, table, valid_runs
from npudure_workshop.bench.groups import aggregate_group, group_by
from npudure_workshop.bench.runs import RunData

LATENCY_COLUMNS = LatencyColumns(("p50", "p99", "p99_9"))
SUMMARY_LATENCY = LatencyColumns(("p50", "p99"))  # the terminal line shows fewer


class OpenLoop(PointExperiment):
    kind = "openloop"
    point_key = "rate_target_inf_per_s"
    point_type = float

    def plan(
        self,
        ctx: PlanContext,
        rates: Sequence[float] = (),
        arrival: str = "poisson",
        seed: int = 0,
        repetitions: int = 1,
        boards: Sequence[str] | None = None,
    ) -> Plan:
        if not rates or any(r <= 0 for r in rates):
            raise ValueError("open-loop rates must be positive, e.g. 20,40,60")
        chosen = tuple(boards or ctx.boards)
        ordered = sorted(set(rates))
        plan = Plan(f"{ctx.series} ({arrival} arrivals at {ordered} inf/s)")
        for rep, rate in stats.alternating_repetitions(ordered, repetitions):
            plan.specs.append(
                self.spec(
                    ctx,
                    f"{ctx.series}-rate{rate:g}-r{rep}",
                    rep,
                    chosen,
                    mode="open",
                    rate=float(rate),
                    arrival=arrival,
                    seed=seed + rep,
                )
            )
        return plan

    def aggregate(self, runs: Sequence[RunData]) -> dict[str, Any]:
        points = {}
        for rate, rs in group_by(runs, lambda r: r.spec["rate"]).items():
            g = aggregate_group(rs)
            schedules = [r.meta.get("schedule") or {} for r in rs]
            g["send_lag_p99_ms_max"] = max((s.get("send_lag_p99_ms", 0.0) for s in schedules), default=None)
            g["generator_behind_schedule_runs"] = sum(
                bool(s.get("generator_behind_schedule")) for s in schedules
            )
            points[str(rate)] = g
        return {"kind": self.kind, "points": points, "warnings": []}

    def point_columns(self, g: dict[str, Any]) -> dict[str, Any]:
        return {
            "send_lag_p99_ms_max": g["send_lag_p99_ms_max"],
            "generator_behind_schedule_runs": g["generator_behind_schedule_runs"],
        }

    def markdown(self, name: str, agg: dict[str, Any]) -> list[str]:
        lines = section("Open loop", name, "Latency from the INTENDED send time.")
        rows = []
        for rate, g in agg["points"].items():
            p = g["latency_pooled_ms"]
            rows.append(
                [
                    rate,
                    f(g["throughput_mean_inf_per_s"]),
                    *LATENCY_COLUMNS.cells(p),
                    f(g["send_lag_p99_ms_max"], ".2f"),
                    g["generator_behind_schedule_runs"],
                    valid_runs(g),
                ]
            )
        header = [
            "λ inf/s",
            "throughput inf/s",
            *LATENCY_COLUMNS.header,
            "send lag p99 ms",
            "runs behind schedule",
            "valid runs",
        ]
        lines.append(table(header, rows))
        first = next(iter(agg["points"].values()))
        lines += ["", f"Conditions: {conditions_line(first['conditions'])}", ""]
        return lines

    def summary_lines(self, name: str, agg: dict[str, Any]) -> list[str]:
        out = [f"[{name}] open loop (latency from intended send time):"]
        for rate, g in agg["points"].items():
            out.append(
                f"  λ={rate}/s: {f(g['throughput_mean_inf_per_s'])} inf/s, "
                f"{SUMMARY_LATENCY.inline(g['latency_pooled_ms'])}, "
                f"send lag p99 {f(g['send_lag_p99_ms_max'], '.2f')} ms"
            )
        return out
