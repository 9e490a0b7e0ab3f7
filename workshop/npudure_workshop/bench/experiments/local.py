"""What the cluster path costs: the same closed-loop load straight at one board's agent (no scheduler,
nothing but loopback when the harness runs on the board) and through the cluster to that board alone,
alternating, board by board (issue #9: the reference's unexplained 16% between local and cluster).

The cluster path is the scheduler, or the proxyless route in ``--mode proxyless``. The comparison is
per board: throughput ratio cluster/local and the latency the path adds (p50, p99, mean).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from npudure_workshop.bench import agent_cpu, fmt, stats
from npudure_workshop.bench.experiments.base import Experiment, Plan, PlanContext, Rows, require_active
from npudure_workshop.bench.fmt import conditions_line, f, section, table, valid_runs
from npudure_workshop.bench.groups import aggregate_group, group_by, group_cols
from npudure_workshop.bench.runs import RunData

LOCAL = "agent"


def _diff(a: float | None, b: float | None) -> float | None:
    return a - b if (a is not None and b is not None) else None


def _agent_cpu(runs: Sequence[RunData], board: str) -> dict[str, float] | None:
    """The board agent's CPU-ms per frame by stage (median over the runs that report it)."""
    rows = [m for r in runs if (m := (r.meta.get("agent_cpu_ms_per_frame") or {}).get(board))]
    if not rows:
        return None
    keys = {k for row in rows for k in row}
    return {k: float(statistics.median(row.get(k, 0.0) for row in rows)) for k in sorted(keys)}


class Local(Experiment):
    kind = "local"

    def plan(
        self,
        ctx: PlanContext,
        per_board: int = 1,
        board: str | None = None,
        repetitions: int = 1,
    ) -> Plan:
        require_active(ctx.boards, board, "--board")
        boards = [board] if board else list(ctx.boards)
        if not boards:
            raise ValueError("no board to measure")
        paths = [LOCAL, ctx.via]
        plan = Plan(
            f"{ctx.series} ({', '.join(boards)}: straight to the agent vs {ctx.via}, {per_board} outstanding)"
        )
        for rep, b in stats.alternating_repetitions(boards, repetitions):
            for via in stats.alternating_order(paths, rep):
                plan.specs.append(
                    self.closed_spec(ctx, f"{ctx.series}-{b}-{via}-r{rep}", rep, (b,), per_board, via=via)
                )
        return plan

    def aggregate(self, runs: Sequence[RunData]) -> dict[str, Any]:
        boards: dict[str, Any] = {}
        warnings = []
        for b, rs in group_by(runs, lambda r: r.spec["boards"][0]).items():
            groups = group_by(rs, lambda r: r.spec.get("via", "scheduler"))
            by_via = {v: aggregate_group(g) for v, g in groups.items()}
            cpu_by_via = {v: _agent_cpu(g, b) for v, g in groups.items()}
            local = by_via.pop(LOCAL, None)
            cluster_via, cluster = next(iter(by_via.items()), (None, None))
            if local is None or cluster is None:
                warnings.append(f"{b}: only one of the two paths was measured")
            xl = local["throughput_mean_inf_per_s"] if local else None
            xc = cluster["throughput_mean_inf_per_s"] if cluster else None
            lat_l = local["latency_pooled_ms"] if local else {}
            lat_c = cluster["latency_pooled_ms"] if cluster else {}
            boards[b] = {
                "local": local,
                "cluster": cluster,
                "cluster_via": cluster_via,
                "cluster_over_local_x": xc / xl if (xc is not None and xl) else None,
                "added_latency_mean_ms": _diff(lat_c.get("mean"), lat_l.get("mean")),
                "added_latency_p50_ms": _diff(lat_c.get("p50"), lat_l.get("p50")),
                "added_latency_p99_ms": _diff(lat_c.get("p99"), lat_l.get("p99")),
                # The agent's own thread CPU per frame by stage, straight and via the cluster.
                "agent_cpu_ms_per_frame": {
                    "local": cpu_by_via.get(LOCAL),
                    "cluster": cpu_by_via.get(cluster_via) if cluster_via else None,
                },
            }
        return {"kind": self.kind, "boards": boards, "warnings": warnings}

    def tables(self, name: str, agg: dict[str, Any]) -> dict[str, Rows]:
        rows, paths = [], []
        for b, d in agg["boards"].items():
            local, cluster = d["local"] or {}, d["cluster"] or {}
            rows.append(
                {
                    "board": b,
                    "via": d["cluster_via"],
                    "local_throughput_inf_per_s": local.get("throughput_mean_inf_per_s"),
                    "cluster_throughput_inf_per_s": cluster.get("throughput_mean_inf_per_s"),
                    "cluster_over_local_x": d["cluster_over_local_x"],
                    "added_latency_mean_ms": d["added_latency_mean_ms"],
                    "added_latency_p50_ms": d["added_latency_p50_ms"],
                    "added_latency_p99_ms": d["added_latency_p99_ms"],
                }
            )
            paths += [{"board": b, **group_cols(g)} for g in (d["local"], d["cluster"]) if g]
        return {f"{name}.csv": rows, f"{name}_paths.csv": paths}

    def markdown(self, name: str, agg: dict[str, Any]) -> list[str]:
        lines = section(
            "Local vs cluster",
            name,
            "The same closed-loop load straight at one board's agent (local) and through the cluster to "
            "that board alone; what the path adds to each request.",
        )
        rows = []
        for b, d in agg["boards"].items():
            local, cluster = d["local"] or {}, d["cluster"] or {}
            rows.append(
                [
                    b,
                    d["cluster_via"] or "–",
                    f(local.get("throughput_mean_inf_per_s")),
                    f(cluster.get("throughput_mean_inf_per_s")),
                    f(d["cluster_over_local_x"], ".3f", "×"),
                    f((local.get("latency_pooled_ms") or {}).get("p50")),
                    f((cluster.get("latency_pooled_ms") or {}).get("p50")),
                    f(d["added_latency_p50_ms"], ".2f"),
                    f(d["added_latency_p99_ms"], ".2f"),
                    " / ".join(valid_runs(g) for g in (d["local"], d["cluster"]) if g),
                ]
            )
        header = [
            "board",
            "cluster path",
            "local inf/s",
            "cluster inf/s",
            "cluster/local",
            "local p50 ms",
            "cluster p50 ms",
            "added p50 ms",
            "added p99 ms",
            "valid runs (local / cluster)",
        ]
        lines.append(table(header, rows))
        for b, d in agg["boards"].items():
            for what, ms in (d.get("agent_cpu_ms_per_frame") or {}).items():
                lines += ["", f"Agent CPU, {b} {what}: {agent_cpu.summary_line(ms)}"]
        for b, d in agg["boards"].items():
            for what in ("local", "cluster"):
                if d[what]:
                    lines += ["", f"Conditions, {b} {what}: {conditions_line(d[what]['conditions'])}"]
        lines += fmt.warning_items(agg["warnings"])
        return [*lines, ""]

    def summary_lines(self, name: str, agg: dict[str, Any]) -> list[str]:
        out = [f"[{name}] straight to the agent (local) vs through the cluster, per board:"]
        for b, d in agg["boards"].items():
            local, cluster = d["local"] or {}, d["cluster"] or {}
            ratio = f(d["cluster_over_local_x"], ".3f", "×")
            out.append(
                f"  {b}: local {f(local.get('throughput_mean_inf_per_s'))} inf/s, {d['cluster_via']} "
                f"{f(cluster.get('throughput_mean_inf_per_s'))} inf/s ({ratio}); added p50 "
                f"{f(d['added_latency_p50_ms'], '.2f')} ms, p99 {f(d['added_latency_p99_ms'], '.2f')} ms"
            )
            local_cpu = (d.get("agent_cpu_ms_per_frame") or {}).get("local")
            out.append(f"    agent CPU (local): {agent_cpu.summary_line(local_cpu)}")
        first = next(iter(agg["boards"].values()), None)
        if first and first["local"]:
            out.append(f"  conditions (local): {conditions_line(first['local']['conditions'])}")
        return out + fmt.warning_lines(agg["warnings"])
