"""The runs: capacity (closed loop at saturation, CPU metered per process group) and latency
(concurrency 1, targets interleaved), each repeated with the order rotated, then the summary and the
verdicts against the issue's targets."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from npudure_workshop.bench import fmt as bench_fmt
from npudure_workshop.bench.forwarding.generator import Generator
from npudure_workshop.bench.forwarding.meter import Meter

SATURATED = 0.90  # a process busy more than this fraction of its core is the bottleneck
STARVED = 0.25  # runnable without a CPU this fraction of the time: contention distorts its figures
TARGET_CAPACITY_RATIO = 1.0  # the targets
TARGET_ADDED_P50_MS = 1.0
NO_PROXY = ("direct", "proxyless")  # paths without a proxy process: no proxy CPU to meter
TARGET_PROXYLESS_VS_DIRECT = 0.98
TARGET_PROXYLESS_ADDED_P50_MS = 0.1

Log = Callable[[str], None]


def pct(values: Sequence[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if len(values) else None


def minus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def med(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return float(np.median(vals)) if vals else None


def capacity_phase(
    gen: Generator, targets: list[str], groups: dict[str, list[int]], args: argparse.Namespace, log: Log
) -> list[dict]:
    runs = []
    for rep in range(args.repetitions):
        order = targets[rep % len(targets) :] + targets[: rep % len(targets)]  # rotate: no order bias
        for target in order:
            meter = Meter(groups)
            marks: dict[str, dict[str, float]] = {}

            def on_mark(kind: str, meter=meter, marks=marks) -> None:
                if kind == "start":
                    meter.start()
                else:
                    marks["cpu"] = meter.stop()

            result = gen.call(
                "closed",
                target,
                args.concurrency,
                args.warmup,
                args.duration,
                timeout_s=args.warmup + args.duration + 90,
                on_mark=on_mark,
            )
            cpu = marks["cpu"]
            n = result["completed"]
            proxy_cpu = cpu.get(target, 0.0) if target not in NO_PROXY else 0.0
            run = {
                "target": target,
                "repetition": rep + 1,
                "completed": n,
                "window_s": result["window_s"],
                "capacity_req_per_s": n / result["window_s"],
                "latency_p50_ms": pct(result["latency_ms"], 50),
                "latency_p99_ms": pct(result["latency_ms"], 99),
                "proxy_cpu_ms_per_req": proxy_cpu / n * 1e3 if n and target not in NO_PROXY else None,
                "proxy_core_busy": proxy_cpu / cpu["wall"] if target not in NO_PROXY else None,
                # Runnable but not running: starved by other processes, or its own threads, on its CPU.
                "proxy_cpu_wait": cpu[f"{target}_wait"] / cpu["wall"] if target not in NO_PROXY else None,
                "generator_cpu_ms_per_req": cpu["generator"] / n * 1e3 if n else None,
                "generator_core_busy": cpu["generator"] / cpu["wall"],
                "agents_cpu_ms_per_req": cpu["agents"] / n * 1e3 if n else None,
                "rest_cores_busy": (cpu["generator"] + cpu["agents"] + cpu["harness"]) / cpu["wall"],
                "others_cores_busy": cpu["others"] / cpu["wall"],
                "inband": {k: {"p50": pct(v, 50), "p99": pct(v, 99)} for k, v in result["inband"].items()},
                "errors": result["errors"],
            }
            runs.append(run)
            log(
                f"  capacity rep {rep + 1} {target:9s} {run['capacity_req_per_s']:7.1f} req/s"
                + (
                    f"  proxy {run['proxy_cpu_ms_per_req']:.2f} CPU-ms/req, core {run['proxy_core_busy']:.0%}"
                    if run["proxy_cpu_ms_per_req"] is not None
                    else ""
                )
                + (f"  ERRORS {sum(result['errors'].values())}" if result["errors"] else "")
            )
    return runs


def latency_phase(
    gen: Generator, targets: list[str], groups: dict[str, list[int]], args: argparse.Namespace, log: Log
) -> list[dict]:
    reps = []
    for rep in range(args.repetitions):
        meter = Meter(groups)
        meter.start()
        result = gen.call("latency", targets, args.duration, args.block, timeout_s=args.duration + 120)
        cpu = meter.stop()
        result["others_cores_busy"] = cpu["others"] / cpu["wall"]
        reps.append(result)
        lat = result["latency_ms"]
        log(
            f"  latency rep {rep + 1}: "
            + "  ".join(
                f"{t} p50 {bench_fmt.f(pct(lat[t], 50), '.2f')} ms (n={len(lat[t])})" for t in targets
            )
            + f"  others {result['others_cores_busy']:.0%}"
        )
    return reps


def summarize(cap_runs: list[dict], lat_reps: list[dict], targets: list[str]) -> dict[str, Any]:
    summary: dict[str, Any] = {"capacity": {}, "latency": {}}
    for target in targets:
        runs = [r for r in cap_runs if r["target"] == target]
        s: dict[str, Any] = {
            k: med([r[k] for r in runs])
            for k in (
                "capacity_req_per_s",
                "proxy_cpu_ms_per_req",
                "proxy_core_busy",
                "proxy_cpu_wait",
                "generator_cpu_ms_per_req",
                "generator_core_busy",
                "agents_cpu_ms_per_req",
                "rest_cores_busy",
                "others_cores_busy",
                "latency_p50_ms",
                "latency_p99_ms",
            )
        }
        s["capacity_min"] = min(r["capacity_req_per_s"] for r in runs)
        s["capacity_max"] = max(r["capacity_req_per_s"] for r in runs)
        cpu = s["proxy_cpu_ms_per_req"]
        s["cpu_bound_capacity_req_per_s"] = 1000.0 / cpu if cpu else None
        s["saturated"] = bool(s["proxy_core_busy"] is not None and s["proxy_core_busy"] >= SATURATED)
        s["errors"] = sum(sum(r["errors"].values()) for r in runs)
        summary["capacity"][target] = s
    pooled = {t: [x for rep in lat_reps for x in rep["latency_ms"][t]] for t in targets}
    direct = pooled["direct"]
    for target in targets:
        s = {
            "p50_ms": pct(pooled[target], 50),
            "p99_ms": pct(pooled[target], 99),
            "n": len(pooled[target]),
        }
        s["errors"] = sum(n for r in lat_reps for k, n in r["errors"].items() if k.startswith(f"{target}:"))
        if target != "direct":
            s["added_p50_ms"] = minus(s["p50_ms"], pct(direct, 50))
            s["added_p99_ms"] = minus(s["p99_ms"], pct(direct, 99))
            s["added_p50_ms_per_rep"] = [
                minus(pct(r["latency_ms"][target], 50), pct(r["latency_ms"]["direct"], 50)) for r in lat_reps
            ]
        summary["latency"][target] = s
    summary["latency_others_cores_busy_per_rep"] = [r["others_cores_busy"] for r in lat_reps]
    inband_low = {k: [x for rep in lat_reps for x in rep["inband"][k]] for k in lat_reps[0]["inband"]}
    summary["inband_concurrency_1"] = {
        k: {"p50": pct(v, 50), "p99": pct(v, 99)} for k, v in inband_low.items()
    }
    sched_runs = [r for r in cap_runs if r["target"] == "scheduler"]
    summary["inband_saturation"] = {
        k: {q: med([r["inband"][k][q] for r in sched_runs]) for q in ("p50", "p99")}
        for k in sched_runs[0]["inband"]
    }
    summary["targets"] = verdicts(summary)
    return summary


def verdicts(summary: dict[str, Any]) -> dict[str, Any]:
    """The issue's targets, judged honestly: a proxy that was not saturated has no measured capacity,
    so the capacity ratio then falls back to the 1-core bound (CPU per request)."""
    cap, lat = summary["capacity"], summary["latency"]
    out: dict[str, Any] = {}
    if "nginx" in cap:
        s, n = cap["scheduler"], cap["nginx"]
        measured = s["capacity_req_per_s"] / n["capacity_req_per_s"]
        bound = None
        if s["cpu_bound_capacity_req_per_s"] and n["cpu_bound_capacity_req_per_s"]:
            bound = s["cpu_bound_capacity_req_per_s"] / n["cpu_bound_capacity_req_per_s"]
        both_saturated = s["saturated"] and n["saturated"]
        judged = measured if both_saturated or bound is None else bound
        out["capacity_ratio"] = {
            "measured": measured,
            "one_core_bound": bound,
            "judged": judged,
            "judged_on": "measured req/s (both proxies saturated)"
            if both_saturated or bound is None
            else "1-core bound (the proxies were not both saturated)",
            "target": TARGET_CAPACITY_RATIO,
            "reached": judged >= TARGET_CAPACITY_RATIO,
        }
    if "proxyless" in cap:
        p, d = cap["proxyless"]["capacity_req_per_s"], cap["direct"]["capacity_req_per_s"]
        nginx = cap["nginx"]["capacity_req_per_s"] if "nginx" in cap else None
        added_p = lat["proxyless"]["added_p50_ms"]
        out["proxyless"] = {
            "vs_direct": p / d if d else None,
            "vs_nginx": p / nginx if nginx else None,
            "added_p50_ms": added_p,
            "reached_vs_direct": bool(d and p / d >= TARGET_PROXYLESS_VS_DIRECT),
            "reached_vs_nginx": None if nginx is None else p >= nginx,
            "reached_added_p50": added_p is not None and added_p <= TARGET_PROXYLESS_ADDED_P50_MS,
        }
    added = lat["scheduler"]["added_p50_ms"]
    out["added_p50_ms"] = {
        "value": added,
        "nginx": lat["nginx"]["added_p50_ms"] if "nginx" in lat else None,
        "target": TARGET_ADDED_P50_MS,
        "reached": added is not None and added <= TARGET_ADDED_P50_MS,
    }
    return out
