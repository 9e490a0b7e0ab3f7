"""One path at one context count, from the ``local`` experiment's group and its runs: figures from valid
runs only, the agent's /proc usage over their windows, and invalid-only figures kept apart."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from npudure_workshop.bench.contexts import CountPoint, _cells, path_point
from npudure_workshop.bench.proc_usage import Usage


def group(
    mean: float | None, per_run: list[float], valid: int, invalid: dict[str, list[str]]
) -> dict[str, Any]:
    return {
        "throughput_mean_inf_per_s": mean,
        "throughput_per_run_inf_per_s": per_run,
        "latency_pooled_ms": {"p50": 10.0, "p99": 20.0} if mean is not None else {},
        "conditions": {"repetitions_valid": valid, "repetitions_total": len(per_run)},
        "invalid_runs": invalid,
    }


def run(valid: bool, cpu: float, rss: float) -> SimpleNamespace:
    return SimpleNamespace(summary={"valid": valid}, usage=Usage(cpu, rss))


def usage(r: SimpleNamespace) -> Usage:
    return r.usage


def test_figures_and_usage_come_from_the_valid_runs() -> None:
    runs = [run(True, 40.0, 100.0), run(False, 90.0, 500.0), run(True, 60.0, 120.0)]
    p = path_point(group(50.0, [49.0, 10.0, 51.0], 2, {"r1": ["host_saturated"]}), runs, usage)
    assert (p.throughput, p.p50_ms, p.p99_ms) == (50.0, 10.0, 20.0)
    assert (p.cpu_pct_of_core, p.rss_max_mib) == (50.0, 120.0)
    assert (p.runs_valid, p.runs_total, p.invalid_reasons) == (2, 3, ["r1: host_saturated"])
    assert p.throughput_invalid is None


def test_with_no_valid_run_the_figure_is_kept_apart_and_shown_in_brackets() -> None:
    p = path_point(group(None, [30.0, 34.0], 0, {"r0": ["x"], "r1": ["y"]}), [run(False, 5.0, 1.0)], usage)
    assert p.throughput is None and p.throughput_invalid == 32.0
    assert p.cpu_pct_of_core == 5.0  # usage over all runs when none is valid
    point = CountPoint(2, 4, 2, {"agent": p, "scheduler": p}, "contexts-2")
    assert _cells(point, "agent")[:4] == ["2", "agent", "4", "(32.0)"]


def test_a_count_the_agent_did_not_apply_says_what_it_ran() -> None:
    p = path_point(group(50.0, [50.0], 1, {}), [run(True, 1.0, 1.0)], usage)
    assert (
        _cells(CountPoint(8, 16, 2, {"agent": p, "scheduler": p}, "contexts-8"), "agent")[0]
        == "8 (agent ran 2)"
    )
