"""The demo's last word: efficiency, p99 growth and per-board spread from a bench summary.json, each
with its conditions — and "invalid" (with the reason) instead of any figure a broken run produced."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def _invalid_reasons(point: Mapping[str, Any]) -> list[str]:
    reasons = [r for rs in (point.get("invalid_runs") or {}).values() for r in rs]
    if not (point.get("conditions") or {}).get("repetitions_valid"):
        reasons = reasons or ["no valid run"]
    return reasons


def _short(reasons: list[str]) -> str:
    first = sorted(set(reasons))[0]
    more = len(set(reasons)) - 1
    return first + (f" (+{more} more)" if more else "")


# The project's scaling goals on emulated boards (a host that is never the bottleneck, runs valid).
EFFICIENCY_GOALS = {3: 0.995, 8: 0.98, 16: 0.97}
P99_GROWTH_GOAL = 0.05


def goal_lines(points: Mapping[int, Mapping[str, Any]]) -> list[str]:
    """Each goal this run can speak to: met, or not met with the repetitions' range (is it noise?)."""
    one = points.get(1)
    if not one or _invalid_reasons(one):
        return []
    lines = []
    thr1 = one["throughput_mean_inf_per_s"]
    p99_1 = one["latency_pooled_ms"]["p99"]
    for n, goal in EFFICIENCY_GOALS.items():
        p = points.get(n)
        if not p or _invalid_reasons(p) or p.get("efficiency") is None:
            continue
        eff = p["efficiency"]
        growth = p["latency_pooled_ms"]["p99"] / p99_1 - 1
        per_run = [t / (n * thr1) for t in p.get("throughput_per_run_inf_per_s") or []]
        spread = f"; repetitions {min(per_run):.1%}..{max(per_run):.1%}" if len(per_run) > 1 else ""
        verdict = "met" if eff >= goal else f"NOT met ({eff:.1%}{spread})"
        lines.append(f"  goal at {n} boards: efficiency >= {goal:.1%}: {verdict}")
        ok = "met" if growth <= P99_GROWTH_GOAL else f"NOT met ({growth:+.1%})"
        lines.append(f"  goal at {n} boards: p99 growth 1->{n} <= {P99_GROWTH_GOAL:.0%}: {ok}")
    return lines


def _windows(points: Mapping[int, Mapping[str, Any]]) -> str:
    """The measurement windows: the harness stretches them at low rates to collect enough samples."""
    lengths = [float(p["conditions"].get("window_s_mean") or 0) for p in points.values()]
    lo, hi = min(lengths), max(lengths)
    return f"{lo:.1f} s windows" if hi - lo < 0.5 else f"{lo:.1f}-{hi:.1f} s windows"


def summary_lines(summary: Mapping[str, Any], time_scale: float | None = None) -> list[str]:
    """Human lines for the scaling experiment; a point with any invalid run prints "invalid"."""
    scaling = (summary.get("experiments") or {}).get("scaling") or {}
    points = {int(n): p for n, p in (scaling.get("points") or {}).items()}
    if not points:
        return ["scaling: no result (the scaling experiment did not run)"]
    one = points.get(1)
    one_bad = _invalid_reasons(one) if one else ["no 1-board point"]
    c = (one or next(iter(points.values())))["conditions"]
    lines = [
        "scaling on "
        + str(c.get("backend", "?"))
        + (f", time scale {time_scale:g}" if time_scale else "")
        + f"; policy {c.get('policy')}, {c.get('per_board_concurrency')} requests per board,"
        + f" {c.get('connections_per_board')} connections per board, {c.get('encoding')} frames"
        + f" of {float(c.get('payload_bytes_mean') or 0) / 1e6:.2f} MB, {_windows(points)},"
        + f" host {os.cpu_count()} cores:"
    ]
    for n in sorted(points):
        p = points[n]
        cond = p["conditions"]
        reps = f"{cond.get('repetitions_valid')}/{cond.get('repetitions_total')} valid"
        bad = _invalid_reasons(p)
        if bad:
            lines.append(f"  {n:2d} board(s): invalid ({reps}): {_short(bad)}")
            continue
        thr = p["throughput_mean_inf_per_s"]
        boards = {b: v["latency_mean_ms"] for b, v in (p.get("boards") or {}).items()}
        spread = max(boards.values()) / min(boards.values()) if boards and min(boards.values()) > 0 else None
        p99 = p["latency_pooled_ms"]["p99"]
        if one_bad or one is None:
            eff, growth = "efficiency invalid (1-board point invalid)", "p99 growth invalid"
        else:
            eff = f"efficiency {p['efficiency']:.1%}" if p.get("efficiency") is not None else "efficiency ?"
            growth = f"p99 growth {p99 / one['latency_pooled_ms']['p99'] - 1:+.1%}"
        lines.append(
            f"  {n:2d} board(s): {thr:.1f} inf/s, {eff}, p99 {p99:.1f} ms ({growth}), per-board "
            f"spread {spread:.2f}x ({reps})"
            if spread is not None
            else f"  {n:2d} board(s): {thr:.1f} inf/s, {eff}, p99 {p99:.1f} ms ({growth}) ({reps})"
        )
    return lines + goal_lines(points)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m npudure_workshop.lab.demo_summary", description=__doc__)
    parser.add_argument("summary", type=Path, help="a bench result folder's summary.json")
    parser.add_argument("--time-scale", type=float, default=None, help="the boards' sim time scale")
    args = parser.parse_args(argv)
    try:
        summary = json.loads(args.summary.read_text())
    except (OSError, ValueError) as exc:
        print(f"demo summary: cannot read {args.summary}: {exc}", file=sys.stderr)
        return 2
    print("\n".join(summary_lines(summary, args.time_scale)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
