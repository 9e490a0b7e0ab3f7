"""The printed figures: conditions, the capacity, latency and routing tables, and the verdicts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from npudure_workshop.bench import fmt as bench_fmt
from npudure_workshop.bench.forwarding.phases import (
    NO_PROXY,
    SATURATED,
    STARVED,
    TARGET_CAPACITY_RATIO,
    TARGET_PROXYLESS_ADDED_P50_MS,
    TARGET_PROXYLESS_VS_DIRECT,
)


def fmt(value: Any, spec: str = ".2f") -> str:
    """The workshop's number format (npudure_workshop.bench.fmt), two decimals by default."""
    return bench_fmt.f(value, spec)


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """The path or field name left, its figures right-aligned under their headers."""
    return bench_fmt.text_table(headers, rows, align="lr", indent="  ")


def report(conditions: dict, summary: dict, routing: list[dict], targets: list[str], nginx_note: str) -> str:
    out: list[str] = ["", "=" * 100]
    out.append(
        "NPUDure scheduler forwarding vs nginx grpc_pass vs proxyless — backend sim (EMULATED NPU), loopback"
    )
    out.append("=" * 100)
    out += [f"  {key:15s} {value}" for key, value in conditions.items()]
    if nginx_note:
        out.append(f"  {'nginx note':15s} {nginx_note}")

    cap = summary["capacity"]
    out += ["", "1. Forwarding capacity, closed loop (median of repetitions; req/s min–max in brackets)"]
    rows = []
    for t in targets:
        s = cap[t]
        rows.append(
            [
                t,
                f"{s['capacity_req_per_s']:.0f} [{s['capacity_min']:.0f}–{s['capacity_max']:.0f}]",
                fmt(s["proxy_cpu_ms_per_req"]),
                fmt(s["proxy_core_busy"], ".0%"),
                fmt(s["proxy_cpu_wait"], ".0%"),
                fmt(s["cpu_bound_capacity_req_per_s"], ".0f"),
                fmt(s["generator_cpu_ms_per_req"]),
                fmt(s["generator_core_busy"], ".0%"),
                fmt(s["agents_cpu_ms_per_req"]),
                fmt(s["rest_cores_busy"], ".0%"),
                fmt(s["others_cores_busy"], ".0%"),
                str(s["errors"]),
            ]
        )
    out += table(
        [
            "path",
            "req/s",
            "proxy CPU-ms/req",
            "proxy core",
            "proxy waited",
            "1-core bound",
            "gen CPU-ms/req",
            "gen core",
            "agents CPU-ms/req",
            "gen+agents",
            "others",
            "errors",
        ],
        rows,
    )
    out += [
        "  proxy core: the proxy's CPU time / wall time (100% = its one core saturated).",
        "  proxy waited: time its threads were runnable but had no CPU / wall time (starved by others).",
        "  1-core bound: 1000 / proxy CPU-ms per request = req/s one core could forward at this cost",
        "    (measured below saturation, where each wake-up carries fewer requests, it errs low).",
        "  gen+agents: CPU of generator + agents + harness / wall, in cores: this measurement's ceiling.",
        "  others: CPU used by processes outside this benchmark during the window (a shared machine).",
    ]
    for t in targets:
        if t in NO_PROXY or cap[t]["saturated"]:
            continue
        wait = cap[t]["proxy_cpu_wait"] or 0.0
        if wait >= STARVED:
            out.append(
                f"  NOTE: {t} was runnable without a CPU {wait:.0%} of the time (other processes, or its own "
                "threads, on its CPU): its req/s understates its capacity."
            )
        else:
            out.append(
                f"  NOTE: {t} was not saturated (core < {SATURATED:.0%} busy): its req/s is the ceiling "
                "set by generator+agents, not its own capacity."
            )

    lat = summary["latency"]
    out += ["", "2. Latency added at concurrency 1 (targets interleaved in blocks; pooled over repetitions)"]
    rows = [
        [
            t,
            fmt(lat[t]["p50_ms"]),
            fmt(lat[t]["p99_ms"]),
            fmt(lat[t].get("added_p50_ms")),
            fmt(lat[t].get("added_p99_ms")),
            str(lat[t]["n"]),
            str(lat[t]["errors"]),
            ", ".join(fmt(x) for x in lat[t].get("added_p50_ms_per_rep", [])) or "—",
        ]
        for t in targets
    ]
    out += table(
        ["path", "p50 ms", "p99 ms", "added p50 ms", "added p99 ms", "n", "errors", "added p50 per rep"], rows
    )
    others = ", ".join(f"{x:.0%}" for x in summary["latency_others_cores_busy_per_rep"])
    out.append(f"  others (CPU used by processes outside this benchmark), per repetition: {others}")

    out += ["", "3. Routing decision time", "  In-band, as the scheduler reports it in each response (µs):"]
    low, high = summary["inband_concurrency_1"], summary["inband_saturation"]
    rows = [
        [
            k,
            fmt(low[k]["p50"], ".0f"),
            fmt(low[k]["p99"], ".0f"),
            fmt(high[k]["p50"], ".0f"),
            fmt(high[k]["p99"], ".0f"),
        ]
        for k in low
    ]
    out += table(["field", "conc 1 p50", "conc 1 p99", "saturation p50", "saturation p99"], rows)
    out += [
        "  route_us: the scheduler's own time besides getting a board and the board call;",
        "  scheduler_queue_us: time to get a board, the policy's choice included.",
        "  Microbenchmark, µs per decision: candidate filter + choose() + in-flight +1, and the -1 when",
        "  a request completes (about half the slots busy); best of 3:",
    ]
    counts = sorted({r["boards"] for r in routing})
    cells = {(r["what"], r["boards"]): r["us_per_decision"] for r in routing}
    names = list(dict.fromkeys(r["what"] for r in routing))
    out += table(
        ["", *(f"N={n}" for n in counts)], [[w, *(fmt(cells.get((w, n))) for n in counts)] for w in names]
    )

    out += ["", "4. Against the issue's targets"]
    v = summary["targets"]
    if "capacity_ratio" in v:
        c = v["capacity_ratio"]
        out.append(
            f"  capacity scheduler/nginx: measured {c['measured']:.2f}×, "
            f"1-core bound {fmt(c['one_core_bound'])}×"
        )
        out.append(
            f"  target ≥ {c['target']:.1f}× nginx forwarding capacity: "
            f"{'REACHED' if c['reached'] else 'NOT REACHED'} ({c['judged']:.2f}×, judged on {c['judged_on']})"
        )
    else:
        out.append(
            f"  target ≥ {TARGET_CAPACITY_RATIO:.1f}× nginx forwarding capacity: NOT MEASURED (no nginx)"
        )
    a = v["added_p50_ms"]
    nginx_part = f"; nginx adds {fmt(a['nginx'])} ms" if a["nginx"] is not None else ""
    reached = "REACHED" if a["reached"] else "NOT REACHED"
    out.append(
        f"  target ≤ {a['target']:.1f} ms added p50 (scheduler): {reached} ({fmt(a['value'])} ms{nginx_part})"
    )
    if "proxyless" in v:
        p = v["proxyless"]

        def verdict(ok: bool | None) -> str:
            return "NOT MEASURED" if ok is None else ("REACHED" if ok else "NOT REACHED")

        out.append(
            f"  target proxyless ≥ {TARGET_PROXYLESS_VS_DIRECT:.2f}× direct: "
            f"{verdict(p['reached_vs_direct'])} ({fmt(p['vs_direct'])}×)"
        )
        out.append(
            f"  target proxyless ≥ nginx: {verdict(p['reached_vs_nginx'])} ({fmt(p['vs_nginx'])}× nginx)"
        )
        out.append(
            f"  target ≤ {TARGET_PROXYLESS_ADDED_P50_MS:.1f} ms added p50 (proxyless): "
            f"{verdict(p['reached_added_p50'])} ({fmt(p['added_p50_ms'])} ms)"
        )
    out.append("=" * 100)
    return "\n".join(out)
