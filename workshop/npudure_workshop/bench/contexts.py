"""``npudure bench contexts``: one board's throughput by inference-context count, and its operating point.

For each count the harness starts a fresh agent with ``contexts: N`` (and a scheduler in front of it)
on loopback, as ``npudure local`` does, and runs the ``local`` experiment on it: the same closed-loop
load (2 x N outstanding by default) straight at the agent and through the scheduler. Each count is a
complete bench result folder (``contexts-N/``: raw samples, validity, ``bench recompute`` works on it);
the sweep's folder adds ``contexts.csv``, ``summary.json`` and ``report.md`` with, per count and path,
inf/s, p50/p99 and the agent process's CPU (% of one core, /proc utime+stime) and peak RSS, and the
operating point: the lowest count within 2% of peak throughput (npudure_workshop.bench.contexts_rule).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from npudure import __version__
from npudure.backends import sim_npu
from npudure_workshop.bench import contexts_rule as rule
from npudure_workshop.bench.fmt import f, table, text_table
from npudure_workshop.bench.payloads import FrameSet
from npudure_workshop.bench.proc_usage import ProcSampler, Usage
from npudure_workshop.bench.results import (
    ResultDirExists,
    exists_message,
    mkdir_new,
    new_result_path,
    write_csv,
    write_json,
)
from npudure_workshop.bench.runs import RunData
from npudure_workshop.bench.settings import BenchSettings

SCHEMA = "npudure-bench-contexts/1"
BOARD = "board1"
PATHS = {"agent": "straight at the agent", "scheduler": "through the scheduler"}
INVALID_NOTE = (
    "(inf/s in brackets): from invalid runs only, shown for the curve's shape, not used by the rule"
)


@dataclass
class Sweep:
    """What the command was asked to measure."""

    backend: str
    counts: list[int]
    load_factor: float
    time_scale: float
    bench: BenchSettings
    frames: FrameSet
    repetitions: int = 1
    model: str | None = None
    # Agent config fields every agent gets (from --agent-config): the model, postprocess, affinity...
    base_agent: dict[str, Any] = field(default_factory=dict)
    progress: str = "auto"
    command: list[str] = field(default_factory=list)

    @property
    def emulated(self) -> bool:
        return self.backend == "sim"

    def conditions(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "emulated_npu": self.emulated,
            "emulation": sim_npu.CALIBRATION if self.emulated else None,
            "time_scale": self.time_scale if self.emulated else None,
            "model": self.model,
            "contexts": self.counts,
            "load": "closed loop",
            "load_factor": self.load_factor,
            "concurrency_by_contexts": {n: rule.concurrency_for(n, self.load_factor) for n in self.counts},
            "repetitions": self.repetitions,
            "warmup_s": self.bench.warmup_s,
            "duration_s": self.bench.duration_s,
            "min_samples": self.bench.min_samples,
            "frames": self.frames.conditions(),
            "host_cores": os.cpu_count() or 1,
            "rule": f"the lowest count within {rule.WITHIN_PEAK:.0%} of peak throughput",
        }


@dataclass
class PathPoint:
    """One path at one count: figures over its valid runs, the agent's /proc usage over their windows."""

    throughput: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    cpu_pct_of_core: float | None = None
    rss_max_mib: float | None = None
    runs_valid: int = 0
    runs_total: int = 0
    invalid_reasons: list[str] = field(default_factory=list)
    # Where no run is valid: their mean inf/s, shown in brackets and never used by the rule (a busy
    # host invalidates every run, yet the curve's shape is still worth seeing).
    throughput_invalid: float | None = None


@dataclass
class CountPoint:
    contexts: int
    concurrency: int
    reported_contexts: int | None  # what the agent said it runs (None: it did not say)
    paths: dict[str, PathPoint]
    folder: str

    @property
    def applied(self) -> bool:
        """The agent runs the count asked for (an agent without a context pool ignores ``contexts``)."""
        return self.reported_contexts in (None, self.contexts)


# ---------------------------------------------------------------------- measuring one count
def _reported_contexts(address: str) -> int | None:
    """The agent's own count: NodeStatus.contexts where the agent reports it, else npu_cores (older
    agents ran one context per NPU core and reported that)."""
    from npudure.client.status import fetch_status
    from npudure.proto import inference_pb2 as pb

    try:
        status = fetch_status(address)
    except Exception:  # any failure here only loses the cross-check, never the measurement
        return None
    if not isinstance(status, pb.NodeStatus):
        return None
    return int(status.contexts or status.npu_cores) or None


def path_point(
    group: dict[str, Any] | None, runs: list[RunData], usage: Callable[[RunData], Usage]
) -> PathPoint:
    """A path's figures from the ``local`` experiment's group and its runs (the agent's CPU and RSS over
    the valid runs' windows; over all of them when none is valid)."""
    if group is None:
        return PathPoint()
    valid = [r for r in runs if r.summary["valid"]] or runs
    readings = [usage(r) for r in valid]
    cpus = [u.cpu_pct_of_core for u in readings if u.cpu_pct_of_core is not None]
    rss = [u.rss_max_mib for u in readings if u.rss_max_mib is not None]
    latency = group["latency_pooled_ms"]
    every = [x for x in group["throughput_per_run_inf_per_s"] if x is not None]
    return PathPoint(
        throughput=group["throughput_mean_inf_per_s"],
        p50_ms=latency.get("p50"),
        p99_ms=latency.get("p99"),
        cpu_pct_of_core=sum(cpus) / len(cpus) if cpus else None,
        rss_max_mib=max(rss) if rss else None,
        runs_valid=group["conditions"]["repetitions_valid"],
        runs_total=group["conditions"]["repetitions_total"],
        invalid_reasons=[f"{run}: {'; '.join(why)}" for run, why in group["invalid_runs"].items()],
        throughput_invalid=sum(every) / len(every)
        if every and group["throughput_mean_inf_per_s"] is None
        else None,
    )


def _window_usage(sampler: ProcSampler) -> Callable[[RunData], Usage]:
    def usage(run: RunData) -> Usage:
        t0 = float(run.meta["t0_unix_s"])
        start, end = run.window
        return sampler.window(t0 + start, t0 + end)

    return usage


def measure_count(sweep: Sweep, contexts: int, folder: Path, note: Callable[[str], None]) -> CountPoint:
    """Agents up with ``contexts: N``, the ``local`` experiment through a bench session, agents down."""
    from npudure_workshop.bench.session import BenchSession
    from npudure_workshop.lab.local import LocalCluster

    concurrency = rule.concurrency_for(contexts, sweep.load_factor)
    agent = {**sweep.base_agent, "contexts": contexts}
    if sweep.emulated:
        agent["sim"] = {**agent.get("sim", {}), "time_scale": sweep.time_scale}
    cluster = LocalCluster(
        boards=1,
        backend=sweep.backend,
        time_scale=sweep.time_scale,
        model=sweep.model,
        # A base config keeps the board's own npu_cores (the SoC's count when it names none).
        npu_cores=None if sweep.base_agent else 2,
        agent_overrides=agent,
        # The scheduler must not hold the load back: its pipeline to the board as deep as the load.
        scheduler_overrides={"board_max_inflight": max(8, concurrency)},
        log_level="WARNING",
    )
    sub = f"contexts-{contexts}"
    note(f"contexts {contexts}: starting an agent and a scheduler on loopback ({concurrency} outstanding)")
    with cluster:
        proc = cluster.agents[BOARD]
        reported = _reported_contexts(proc.address)
        assert proc.pid is not None and cluster.scheduler is not None and cluster.scheduler.pid is not None
        sampler = ProcSampler(proc.pid).start()
        session = BenchSession(
            cluster.address,
            folder / sub,
            sweep.bench,
            sweep.frames,
            scheduler_pids=[cluster.scheduler.pid],
            progress=sweep.progress,
            command=sweep.command,
        )
        try:
            with session:
                agg = session.run("local", per_board=concurrency, board=BOARD, repetitions=sweep.repetitions)
        finally:
            sampler.stop()
            (folder / "agents").mkdir(exist_ok=True)
            (folder / "agents" / f"{sub}.log").write_text(cluster.logs(BOARD))
    board = agg["boards"][BOARD]
    usage = _window_usage(sampler)
    by_via = {via: [r for r in session.runs if r.spec.get("via") == via] for via in ("agent", "scheduler")}
    paths = {
        "agent": path_point(board["local"], by_via["agent"], usage),
        "scheduler": path_point(board["cluster"], by_via["scheduler"], usage),
    }
    return CountPoint(contexts, concurrency, reported, paths, sub)


# ---------------------------------------------------------------------- the sweep
def make_folder(out: str | Path | None) -> Path:
    """A new result folder (an existing one is refused, as for every bench command)."""
    path = Path(out) if out else new_result_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    return mkdir_new(path, lambda p: ResultDirExists(exists_message(p)))


def operating_points(points: list[CountPoint]) -> dict[str, rule.OperatingPoint | None]:
    """Per path, by the rule, over the counts the agent actually ran."""
    applied = [p for p in points if p.applied]
    return {
        via: rule.operating_point({p.contexts: p.paths[via].throughput for p in applied}) for via in PATHS
    }


def run_sweep(
    sweep: Sweep, folder: Path, note: Callable[[str], None], points: list[CountPoint]
) -> list[CountPoint]:
    """Every count in turn, each appended to ``points``; the folder's manifest first, its tables after
    each count (a sweep that is interrupted keeps the counts it finished)."""
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    manifest = {
        "schema": SCHEMA,
        "harness_version": __version__,
        "command": sweep.command,
        "started_at_utc": started,
        "conditions": sweep.conditions(),
        "settings": asdict(sweep.bench),
    }
    write_json(folder / "manifest.json", manifest)
    for contexts in sweep.counts:
        points.append(measure_count(sweep, contexts, folder, note))
        write_results(folder, sweep, points)
    write_json(
        folder / "manifest.json",
        {**manifest, "finished_at_utc": datetime.now(timezone.utc).isoformat(timespec="seconds")},
    )
    return points


# ---------------------------------------------------------------------- what is written and printed
def rows(points: list[CountPoint]) -> list[dict[str, Any]]:
    out = []
    for p in points:
        for via, v in p.paths.items():
            out.append(
                {
                    "contexts": p.contexts,
                    "contexts_reported": p.reported_contexts,
                    "path": via,
                    "concurrency": p.concurrency,
                    "throughput_inf_per_s": v.throughput,
                    "latency_p50_ms": v.p50_ms,
                    "latency_p99_ms": v.p99_ms,
                    "agent_cpu_pct_of_core": v.cpu_pct_of_core,
                    "agent_rss_max_mib": v.rss_max_mib,
                    "runs_valid": v.runs_valid,
                    "runs_total": v.runs_total,
                    "folder": p.folder,
                }
            )
    return out


def _point_json(op: rule.OperatingPoint | None) -> dict[str, Any] | None:
    return None if op is None else {**asdict(op), "fraction_of_peak": op.fraction_of_peak}


def write_results(folder: Path, sweep: Sweep, points: list[CountPoint]) -> None:
    ops = operating_points(points)
    write_csv(folder / "contexts.csv", rows(points))
    write_json(
        folder / "summary.json",
        {
            "schema": SCHEMA,
            "kind": "contexts",
            "conditions": sweep.conditions(),
            "points": [{**asdict(p), "applied": p.applied} for p in points],
            "operating_point": {via: _point_json(op) for via, op in ops.items()},
            "runs_invalid": sum(v.runs_total - v.runs_valid for p in points for v in p.paths.values()),
        },
    )
    lines = ["# Context count sweep (`npudure bench contexts`)", ""]
    lines += [f"- {line.strip()}" for line in conditions_lines(sweep)] + [""]
    header = [
        "contexts",
        "path",
        "outstanding",
        "inf/s",
        "p50 ms",
        "p99 ms",
        "agent CPU % of a core",
        "agent RSS MiB",
        "valid runs",
    ]
    lines += [table(header, [_cells(p, via) for p in points for via in PATHS]), ""]
    lines += [f"- invalid: {line}" for line in invalid_lines(points)]
    if any(v.throughput_invalid is not None for p in points for v in p.paths.values()):
        lines.append(f"- {INVALID_NOTE}")
    lines += [f"- {line}" for line in result_lines(points)]
    lines += [
        "",
        "Each count's own result folder (raw samples, validity): `contexts-N/`; agent logs: `agents/`.",
        "",
    ]
    (folder / "report.md").write_text("\n".join(lines))


def _cells(p: CountPoint, via: str) -> list[str]:
    v = p.paths[via]
    return [
        str(p.contexts) if p.applied else f"{p.contexts} (agent ran {p.reported_contexts})",
        via,
        str(p.concurrency),
        f(v.throughput) if v.throughput_invalid is None else f"({v.throughput_invalid:.1f})",
        f(v.p50_ms, ".2f"),
        f(v.p99_ms, ".2f"),
        f(v.cpu_pct_of_core, ".0f"),
        f(v.rss_max_mib, ".0f"),
        f"{v.runs_valid}/{v.runs_total}",
    ]


def conditions_lines(sweep: Sweep) -> list[str]:
    c = sweep.conditions()
    frames = c["frames"]
    backend = f"backend {sweep.backend}"
    if sweep.emulated:
        backend += (
            f" (EMULATED NPU: every figure is the emulator's, {sim_npu.CALIBRATION}), "
            f"time scale {sweep.time_scale:g}"
        )
    loads = ", ".join(f"{n}->{conc}" for n, conc in c["concurrency_by_contexts"].items())
    return [
        f"conditions: {backend}; one board, its agent started here for each count, a scheduler in front",
        f"  load: closed loop at {sweep.load_factor:g} x contexts outstanding "
        f"(contexts->outstanding: {loads}); {sweep.repetitions} run(s) per path and count",
        f"  payload: {frames['encoding']}, {frames['payload_bytes_mean']:.0f} B mean, "
        f"{frames['frame_source']}; warm-up {sweep.bench.warmup_s:g} s, window "
        f"{sweep.bench.duration_s:g} s (at least {sweep.bench.min_samples} samples); "
        f"host {c['host_cores']} core(s)",
    ]


def invalid_lines(points: list[CountPoint]) -> list[str]:
    """Why a run was invalid (its figures are left out, as in every bench table)."""
    return [
        f"{p.contexts} contexts, {via}: {reason}"
        for p in points
        for via, v in p.paths.items()
        for reason in v.invalid_reasons
    ]


def result_lines(points: list[CountPoint]) -> list[str]:
    """The operating point per path, and what stands in the way of one."""
    out = []
    for p in points:
        if not p.applied:
            out.append(
                f"WARNING: contexts {p.contexts}: the agent runs {p.reported_contexts} context(s): it does "
                "not apply `contexts` (an agent without the context pool?); the rule leaves this count out"
            )
    for via, op in operating_points(points).items():
        if op is None:
            out.append(f"operating point ({PATHS[via]}): none: no count has a valid run the agent applied")
            continue
        out.append(
            f"operating point ({PATHS[via]}): {op.contexts} contexts, {op.throughput:.1f} inf/s = "
            f"{op.fraction_of_peak:.1%} of the peak {op.peak_throughput:.1f} inf/s at {op.peak_contexts} "
            f"(the lowest count within {rule.WITHIN_PEAK:.0%} of peak throughput)"
        )
    return out


def print_results(points: list[CountPoint], folder: Path) -> None:
    """The table and the operating points (the conditions were printed when the sweep started)."""
    header = ["contexts", "path", "outstanding", "inf/s", "p50 ms", "p99 ms", "CPU %core", "RSS MiB", "valid"]
    for line in text_table(header, [_cells(p, via) for p in points for via in PATHS], align="llr", rule=True):
        print(line)
    for line in invalid_lines(points):
        print(f"  invalid: {line}")
    if any(v.throughput_invalid is not None for p in points for v in p.paths.values()):
        print(f"  {INVALID_NOTE}")
    for line in result_lines(points):
        print(line)
    print(f"results: {folder}")
    sys.stdout.flush()
