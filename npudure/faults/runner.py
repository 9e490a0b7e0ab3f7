"""One fault at a time under closed-loop load: settle, baseline, inject, hold, lift, recover, restore.

Each fault gets its own load window of fixed length (the harness's generator runs for a set span):
warm-up, a baseline, the fault (held faults for ``hold_s``), then the fault's recovery budget. The
fault is restored in a ``finally`` whatever happens, and everything recorded is written to the fault's
own folder before the next one starts.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from npudure.bench.payloads import FrameSet
from npudure.bench.results import write_csv, write_json
from npudure.faults.analysis import (
    FaultResult,
    Timeline,
    analyse_board_fault,
    analyse_scheduler_restart,
)
from npudure.faults.background import BackgroundLoad, Poll, StatusPoller
from npudure.faults.fleet import Fleet
from npudure.faults.scenarios import FaultSpec, restore_quietly

Log = Callable[[str], None]


@dataclass(frozen=True)
class Timing:
    warmup_s: float = 1.0
    baseline_s: float = 5.0
    hold_s: float = 6.0  # how long a held fault stays
    settle_timeout_s: float = 60.0  # every board UP before a fault starts
    recovery_budget_s: float | None = None  # None: each fault's own budget
    tail_s: float = 1.0

    def budget(self, spec: FaultSpec) -> float:
        return self.recovery_budget_s if self.recovery_budget_s is not None else spec.recovery_budget_s


def pick_boards(specs: Sequence[FaultSpec], boards: Sequence[str]) -> list[str]:
    """Board faults take the boards in turn, so one board's recovery does not hide the next fault."""
    out, i = [], 0
    for spec in specs:
        if spec.on_scheduler:
            out.append("sched")
        else:
            out.append(boards[i % len(boards)])
            i += 1
    return out


def _sleep_until(t0: float, at_s: float, load: BackgroundLoad) -> None:
    while (left := t0 + at_s - time.perf_counter()) > 0:
        if not load.is_alive():
            raise RuntimeError(f"the load generator stopped early: {load.error!r}")
        time.sleep(min(0.05, left))


def _write_polls(path: Path, polls: Sequence[Poll]) -> None:
    rows = []
    for p in polls:
        if p.states is None:
            rows.append(
                {"t_s": round(p.t_s, 4), "board": "", "state": "", "served_total": None, "error": p.error}
            )
        for board, state in (p.states or {}).items():
            rows.append(
                {"t_s": round(p.t_s, 4), "board": board, "state": state, "served_total": p.served.get(board)}
            )
    write_csv(path, rows, ["t_s", "board", "state", "served_total", "error"])


def run_fault(
    fleet: Fleet,
    spec: FaultSpec,
    board: str,
    frames: FrameSet,
    concurrency: int,
    timing: Timing,
    out_dir: Path,
    log: Log = print,
    mode: str = "scheduler",
) -> FaultResult:
    ok, states = fleet.wait_all_up(timing.settle_timeout_s)
    if not ok:
        r = FaultResult(spec.name, board)
        r.why.append(f"skipped: the boards were not all UP within {timing.settle_timeout_s:.0f} s ({states})")
        return r
    inject_at = timing.warmup_s + timing.baseline_s
    end = inject_at + (timing.hold_s if spec.held else 0.0) + timing.budget(spec) + timing.tail_s
    log(f"{spec.name} on {board}: {spec.what} (load window {end:.0f} s)")
    t0 = time.perf_counter()
    poller = StatusPoller(fleet.scheduler, t0)
    load = BackgroundLoad(
        fleet.scheduler, frames.requests, concurrency, timing.warmup_s, end - timing.warmup_s, t0, mode=mode
    )
    poller.start()
    load.start()
    inject_s = injected_s = lift_s = None
    problems: list[str] = []
    try:
        _sleep_until(t0, inject_at, load)
        inject_s = time.perf_counter() - t0
        spec.inject(fleet, board)
        injected_s = time.perf_counter() - t0
        if spec.held and spec.lift is not None:
            _sleep_until(t0, inject_s + timing.hold_s, load)
            spec.lift(fleet, board)
            lift_s = time.perf_counter() - t0
    except Exception as exc:
        problems.append(f"{spec.name} on {board}: {exc}")
    finally:
        if why := restore_quietly(spec, fleet, board):
            problems.append(why)
        try:
            result = load.join()
        finally:
            polls = poller.stop()
    samples = result.samples
    samples.save(out_dir / "samples.npz")
    _write_polls(out_dir / "status.csv", polls)
    tl = None
    if inject_s is None or injected_s is None:
        r = FaultResult(spec.name, board)
    else:
        tl = Timeline(timing.warmup_s, inject_s, injected_s, lift_s, result.window_end_s)
        if spec.on_scheduler:
            r = analyse_scheduler_restart(fleet.boards, samples, polls, tl, lossless=mode == "proxyless")
        else:
            r = analyse_board_fault(
                spec.name, board, spec.excludes, samples, polls, tl, proxyless=mode == "proxyless"
            )
    r.why += problems or ([] if tl else ["the fault was not injected"])
    r.passed = not r.why
    write_json(
        out_dir / "fault.json",
        {
            "fault": spec.name,
            "what": spec.what,
            "board": board,
            "concurrency": concurrency,
            "mode": mode,
            "timing": asdict(timing),
            "recovery_budget_s": timing.budget(spec),
            "timeline_s": asdict(tl) if tl else None,
            "load_errors": result.error_messages,
            "result": r.as_dict(),
        },
    )
    return r


def run_suite(
    fleet: Fleet,
    specs: Sequence[FaultSpec],
    frames: FrameSet,
    concurrency: int,
    timing: Timing,
    out: Path,
    log: Log = print,
    mode: str = "scheduler",
) -> list[FaultResult]:
    results: list[FaultResult] = []
    for i, (spec, board) in enumerate(zip(specs, pick_boards(specs, fleet.boards), strict=True), 1):
        folder = out / f"{i:02d}-{spec.name}"
        folder.mkdir()
        r = run_fault(fleet, spec, board, frames, concurrency, timing, folder, log, mode)
        log(
            f"  -> {'PASS' if r.passed else 'FAIL'}: failed={r.failed} excluded_after_s={r.excluded_after_s} "
            f"back_after_s={r.back_after_s}" + (f" ({'; '.join(r.why)})" if r.why else "")
        )
        results.append(r)
        write_csv(out / "faults.csv", [flat_row(x) for x in results])
    return results


def flat_row(r: FaultResult) -> dict:
    row = r.as_dict()
    row["error_codes"] = json.dumps(r.error_codes, sort_keys=True)
    row["states_seen"] = "/".join(r.states_seen)
    row["why"] = "; ".join(r.why)
    return {
        ("throughput_before_req_per_s" if k == "throughput_before" else "throughput_during_req_per_s")
        if k.startswith("throughput")
        else k: v
        for k, v in row.items()
    }
