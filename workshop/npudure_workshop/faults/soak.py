"""The soak: fixed moderate closed-loop load for N minutes while the scheduler's and every agent's RSS
(VmRSS) and open file descriptors are sampled every ~10 s inside their machines; then a verdict
against stated bounds, measured from the end of a warm-up (allocator pools and caches fill first)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import grpc

from npudure_workshop.bench.payloads import FrameSet
from npudure_workshop.bench.results import write_csv, write_json
from npudure_workshop.faults.analysis import Column, cell, error_codes, pass_fail, spec_table
from npudure_workshop.faults.background import BackgroundLoad
from npudure_workshop.faults.fleet import SCHEDULER_HOST, Fleet
from npudure_workshop.faults.scenarios import AGENT_UNIT, SCHEDULER_UNIT

Log = Callable[[str], None]
MIB = 1024.0

# One command per machine: the unit's MainPID, its VmRSS (kB) and its fd count, read from the
# machine's own /proc (the container has its own PID namespace).
PROBE = (
    'pid=$(systemctl show -p MainPID --value {unit}); echo "pid $pid"; '
    "awk '/^VmRSS:/ {{print \"rss_kib\", $2}}' /proc/$pid/status; "
    'echo "fds $(ls /proc/$pid/fd | wc -l)"'
)


@dataclass(frozen=True)
class Bounds:
    rss_growth_pct: float = 20.0
    rss_growth_mib: float = 50.0
    fd_growth: int = 10

    def describe(self) -> str:
        return (
            f"after the warm-up: RSS growth <= {self.rss_growth_pct:.0f}% "
            f"and <= {self.rss_growth_mib:.0f} MiB, "
            f"open fd growth <= {self.fd_growth}, no process restart, no failed request"
        )


@dataclass(frozen=True)
class ProcSample:
    t_s: float
    process: str  # sched, board1, ...
    pid: int | None
    rss_kib: int | None
    fds: int | None


@dataclass
class ProcVerdict:
    process: str
    pid_start: int | None
    pid_end: int | None
    rss_start_mib: float | None
    rss_end_mib: float | None
    rss_peak_mib: float | None
    rss_growth_mib: float | None
    rss_growth_pct: float | None
    fds_start: int | None
    fds_end: int | None
    fd_growth: int | None
    # Least-squares RSS slope over each half of the post-warm-up samples: a leak keeps its slope in the
    # second half, a plateau's drops to ~0.
    slope_first_mib_min: float | None = None
    slope_second_mib_min: float | None = None
    passed: bool = False
    why: list[str] = field(default_factory=list)


def parse_probe(text: str) -> tuple[int | None, int | None, int | None]:
    values: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            values[parts[0]] = int(parts[1])
    pid = values.get("pid") or None
    return pid, values.get("rss_kib") if pid else None, values.get("fds") if pid else None


def sample_processes(fleet: Fleet, t_s: float) -> list[ProcSample]:
    out = []
    hosts = [(SCHEDULER_HOST, SCHEDULER_UNIT)] + [(b, AGENT_UNIT) for b in fleet.boards]
    for host, unit in hosts:
        try:
            proc = fleet.lab.exec(host, PROBE.format(unit=unit), timeout=15)
            pid, rss, fds = parse_probe(proc.stdout)
        except Exception:
            pid = rss = fds = None
        out.append(ProcSample(t_s, host, pid, rss, fds))
    return out


def rss_slope_mib_per_min(samples: Sequence[ProcSample]) -> float | None:
    """Least-squares slope of RSS against time, in MiB per minute (None for fewer than 2 samples)."""
    points = [(s.t_s / 60.0, s.rss_kib / MIB) for s in samples if s.rss_kib is not None]
    if len({t for t, _ in points}) < 2:  # linear_regression needs two distinct times
        return None
    minutes, mib = zip(*points, strict=True)
    return statistics.linear_regression(minutes, mib).slope


def verdict(samples: Sequence[ProcSample], warmup_s: float, bounds: Bounds) -> list[ProcVerdict]:
    """Per process: growth from the first sample at or after the warm-up to the last sample."""
    out = []
    for name in dict.fromkeys(s.process for s in samples):
        mine = [s for s in samples if s.process == name]
        after = [s for s in mine if s.t_s >= warmup_s and s.rss_kib is not None and s.fds is not None]
        if len(after) < 2:
            v = ProcVerdict(name, None, None, None, None, None, None, None, None, None, None)
            v.why.append(f"fewer than 2 readable samples after the {warmup_s:.0f} s warm-up")
            out.append(v)
            continue
        first, last = after[0], after[-1]
        assert first.rss_kib is not None and last.rss_kib is not None
        assert first.fds is not None and last.fds is not None
        growth = (last.rss_kib - first.rss_kib) / MIB
        pct = 100.0 * (last.rss_kib - first.rss_kib) / first.rss_kib if first.rss_kib else None
        v = ProcVerdict(
            name,
            first.pid,
            last.pid,
            first.rss_kib / MIB,
            last.rss_kib / MIB,
            max(s.rss_kib for s in after if s.rss_kib is not None) / MIB,
            growth,
            pct,
            first.fds,
            last.fds,
            last.fds - first.fds,
            rss_slope_mib_per_min(after[: (len(after) + 1) // 2]),
            rss_slope_mib_per_min(after[len(after) // 2 :]),
        )
        pids = {s.pid for s in mine if s.pid is not None}
        if len(pids) > 1:
            v.why.append(f"the process restarted during the soak (pids {sorted(pids)})")
        if growth > bounds.rss_growth_mib:
            v.why.append(f"RSS grew {growth:.1f} MiB (bound {bounds.rss_growth_mib:.0f} MiB)")
        if pct is not None and pct > bounds.rss_growth_pct:
            v.why.append(f"RSS grew {pct:.1f}% (bound {bounds.rss_growth_pct:.0f}%)")
        if last.fds - first.fds > bounds.fd_growth:
            v.why.append(f"open fds grew by {last.fds - first.fds} (bound {bounds.fd_growth})")
        v.passed = not v.why
        out.append(v)
    return out


def _f(value: float | int | None, digits: int = 1) -> str:
    return str(value) if isinstance(value, int) else cell(value, digits)  # counts and pids as they are


def _mib(kib: int | None) -> str:
    return _f(None if kib is None else kib / MIB)


def _pid(v: ProcVerdict) -> str:
    return _f(v.pid_start) if v.pid_start == v.pid_end else f"{_f(v.pid_start)}->{_f(v.pid_end)}"


# The figures of the table, after the process and its pid: (header, ProcVerdict field, decimals).
FIGURES = (
    ("RSS start MiB", "rss_start_mib", 1),
    ("RSS end MiB", "rss_end_mib", 1),
    ("RSS peak MiB", "rss_peak_mib", 1),
    ("growth MiB", "rss_growth_mib", 2),
    ("growth %", "rss_growth_pct", 1),
    ("fds start", "fds_start", 1),
    ("fds end", "fds_end", 1),
    ("fd growth", "fd_growth", 1),
    ("MiB/min 1st half", "slope_first_mib_min", 3),
    ("MiB/min 2nd half", "slope_second_mib_min", 3),
)


def _figure(name: str, digits: int) -> Callable[[ProcVerdict], str]:
    return lambda v: _f(getattr(v, name), digits)


def table(verdicts: Sequence[ProcVerdict]) -> str:
    columns: list[Column[ProcVerdict]] = [("process", 0, lambda v: v.process), ("pid", 0, _pid)]
    columns += [(header, 0, _figure(name, digits)) for header, name, digits in FIGURES]
    columns.append(("verdict", 0, lambda v: pass_fail(v.passed)))
    return "\n".join(spec_table(columns, verdicts))


@dataclass
class SoakResult:
    minutes: float
    concurrency: int
    warmup_s: float
    bounds: Bounds
    samples: list[ProcSample]
    verdicts: list[ProcVerdict]
    requests: int
    failed: int
    error_codes: dict[str, int]
    throughput: float | None
    passed: bool
    why: list[str]


def _served_total(fleet: Fleet) -> int | None:
    try:
        return int(fleet.status(timeout=2.0).served_total)
    except grpc.RpcError:
        return None


def run_soak(
    fleet: Fleet,
    frames: FrameSet,
    concurrency: int,
    minutes: float,
    out: Path,
    interval_s: float = 10.0,
    warmup_s: float | None = None,
    bounds: Bounds | None = None,
    log: Log = print,
) -> SoakResult:
    bounds = bounds or Bounds()
    duration = minutes * 60.0
    # A minute of warm-up on a long soak; a third of a short one, so growth is still measured.
    warmup = warmup_s if warmup_s is not None else min(60.0, duration / 3)
    log(
        f"soak: {minutes:g} min at concurrency {concurrency} through {fleet.scheduler}; "
        f"sampling every {interval_s:g} s; bound {bounds.describe()}"
    )
    t0 = time.perf_counter()
    load = BackgroundLoad(fleet.scheduler, frames.requests, concurrency, 1.0, duration - 1.0, t0)
    load.start()
    samples: list[ProcSample] = []
    rows: list[dict] = []
    last_served: int | None = None
    last_t = 0.0
    # Every interval, and once more just before the load stops (after it, connections close and the
    # fd counts drop, which would hide growth).
    last_at = duration - 1.0
    schedule = [i * interval_s for i in range(int(last_at // interval_s) + 1)]
    if last_at - schedule[-1] > 2.0:
        schedule.append(last_at)
    try:
        while load.is_alive() and schedule:
            now = time.perf_counter() - t0
            if now >= schedule[0]:
                schedule.pop(0)
                batch = sample_processes(fleet, now)
                served = _served_total(fleet)
                rate = None
                if served is not None and last_served is not None and now > last_t:
                    rate = (served - last_served) / (now - last_t)
                last_served, last_t = served, now
                samples += batch
                for s in batch:
                    rows.append({**asdict(s), "t_s": round(s.t_s, 2), "served_req_per_s": rate})
                log(
                    f"  t={now:5.0f}s "
                    + " | ".join(f"{s.process} {_mib(s.rss_kib)} MiB {_f(s.fds)} fds" for s in batch)
                    + f" | {_f(rate)} req/s"
                )
            time.sleep(0.2)
    finally:
        result = load.join()
    write_csv(out / "soak.csv", rows, ["t_s", "process", "pid", "rss_kib", "fds", "served_req_per_s"])
    verdicts = verdict(samples, warmup, bounds)
    codes = error_codes(result.samples)
    failed = sum(codes.values())
    ok = result.samples.ok
    span = result.window_end_s - result.window_start_s
    throughput = (
        float((ok & (result.samples.done_s >= result.window_start_s)).sum()) / span if span > 0 else None
    )
    why = [f"{v.process}: {w}" for v in verdicts for w in v.why]
    if failed:
        why.append(f"{failed} request(s) failed: " + ", ".join(f"{k} x{n}" for k, n in codes.items()))
    soak = SoakResult(
        minutes,
        concurrency,
        warmup,
        bounds,
        samples,
        verdicts,
        len(result.samples),
        failed,
        codes,
        throughput,
        not why,
        why,
    )
    result.samples.save(out / "samples.npz")
    write_json(
        out / "soak.json",
        {
            **{k: v for k, v in asdict(soak).items() if k != "samples"},
            "scheduler": fleet.scheduler,
            "load_errors": result.error_messages,
            "load_replayed": result.replayed,
        },
    )
    return soak


def report(soak: SoakResult) -> str:
    lines = [
        table(soak.verdicts),
        "",
        f"requests: {soak.requests} sent, {soak.failed} failed"
        + (f" ({', '.join(f'{k} x{n}' for k, n in soak.error_codes.items())})" if soak.failed else "")
        + f", {_f(soak.throughput)} req/s answered (EMULATED NPU, sim backend)",
        f"bound: {soak.bounds.describe()} (warm-up {soak.warmup_s:.0f} s)",
        "verdict: " + ("PASS" if soak.passed else "FAIL: " + "; ".join(soak.why)),
    ]
    return "\n".join(lines)
