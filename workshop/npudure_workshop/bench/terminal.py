"""What the harness prints: one line per finished run, and the summary at the end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from npudure_workshop.bench import experiments
from npudure_workshop.bench.fmt import f


def run_line(s: dict[str, Any]) -> str:
    """One line per finished run, for the terminal."""
    lat = s["latency_ms"]
    load = (
        f"c={s['concurrency_total']}"
        if s["mode"] == "closed"
        else f"λ={f(s['rate_target_inf_per_s'], 'g')}/s"
    )
    cap = f" cap {s['cap_board']}={s['cap_mhz'] or 'none'}" if s.get("cap_board") else ""
    status = "valid" if s["valid"] else "INVALID: " + "; ".join(r.split(":")[0] for r in s["invalid_reasons"])
    if s["valid"] and s.get("noted"):
        status += " (expected_reboot, noted)"
    via = s.get("via", "scheduler")
    load += "" if via == "scheduler" else f" {via}"
    line = (
        f"{s['run_id']:<34} {s['n_boards']} boards {load:<7}{cap} {f(s['throughput_inf_per_s'])} inf/s  "
        f"p50 {f(lat['p50'])} p99 {f(lat['p99'])} ms  n={s['samples_ok']}  {status}"
    )
    models = s.get("models") or {}
    if len(models) > 1:  # a mixed load: each model's share of it
        line += "".join(
            f"\n    model {name}: {f(m['throughput_inf_per_s'])} inf/s  p50 {f(m['latency_p50_ms'])} "
            f"p99 {f(m['latency_p99_ms'])} ms  n={m['samples_ok']}"
            for name, m in models.items()
        )
    return line


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
        out += experiments.get(agg["kind"]).summary_lines(name, agg)
    out.append(f"Report: {folder / 'report.md'}")
    return "\n".join(out)
