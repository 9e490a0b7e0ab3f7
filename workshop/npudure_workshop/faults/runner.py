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

from npudure_workshop.bench.payloads import FrameSet
from npudure_workshop.bench.results import write_csv, write_json
from npudure_workshop.faults.analysis import (
    FaultResult,
    Timeline,
    analyse_board_fault,
    analyse_scheduler_restart,
    pass_fail,
)
from npudure_workshop.faults.background import BackgroundLoad, Poll, StatusPoller
from npudure_workshop.faults.fleet import Fleet
from npudure_workshop.faults.scenarios import FaultSpec, restore_quietly

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


@dataclass(frozen=True)
class Suite:
    """A fault suite's fixed settings: the fleet, the load every fault runs under, and its timing."""

    fleet: Fleet
    frames: FrameSet
    concurrency: int  # requests kept in flight
    timing: Timing
    mode: str = "scheduler"  # how the load reaches the boards: "scheduler" or "proxyless"
    log: Log = print

    def run(self, specs: Sequence[FaultSpec], out: Path) -> list[FaultResult]:
        """Each fault in turn under load, its raw data in a numbered folder of ``out``."""
        results: list[FaultResult] = []
        for i, (spec, board) in enumerate(zip(specs, pick_boards(specs, self.fleet.boards), strict=True), 1):
            folder = out / f"{i:02d}-{spec.name}"
            folder.mkdir()
            r = self.run_fault(spec, board, folder)
            self.log(
                f"  -> {pass_fail(r.passed)}: failed={r.failed} "
                f"excluded_after_s={r.excluded_after_s} back_after_s={r.back_after_s}"
                + (f" ({'; '.join(r.why)})" if r.why else "")
            )
            results.append(r)
            write_csv(out / "faults.csv", [flat_row(x) for x in results])
        return results

    def run_fault(self, spec: FaultSpec, board: str, out_dir: Path) -> FaultResult:
        """One fault under load: inject, hold, lift, restore; its samples and status polls in ``out_dir``."""
        ok, states = self.fleet.wait_all_up(self.timing.settle_timeout_s)
        if not ok:
            r = FaultResult(spec.name, board)
            r.why.append(
                f"skipped: the boards were not all UP within {self.timing.settle_timeout_s:.0f} s ({states})"
            )
            return r
        inject_at = self.timing.warmup_s + self.timing.baseline_s
        end = (
            inject_at
            + (self.timing.hold_s if spec.held else 0.0)
            + self.timing.budget(spec)
            + self.timing.tail_s
        )
        self.log(f"{spec.name} on {board}: {spec.what} (load window {end:.0f} s)")
        t0 = time.perf_counter()
        poller = StatusPoller(self.fleet.scheduler, t0)
        load = BackgroundLoad(
            self.fleet.scheduler,
            self.frames.requests,
            self.concurrency,
            self.timing.warmup_s,
            end - self.timing.warmup_s,
            t0,
            mode=self.mode,
        )
        poller.start()
        load.start()
        inject_s = injected_s = lift_s = None
        problems: list[str] = []
        try:
            _sleep_until(t0, inject_at, load)
            inject_s = time.perf_counter() - t0
            spec.inject(self.fleet, board)
            injected_s = time.perf_counter() - t0
            if spec.held and spec.lift is not None:
                _sleep_until(t0, inject_s + self.timing.hold_s, load)
                spec.lift(self.fleet, board)
                lift_s = time.perf_counter() - t0
        except Exception as exc:
            problems.append(f"{spec.name} on {board}: {exc}")
        finally:
            if why := restore_quietly(spec, self.fleet, board):
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
            tl = Timeline(self.timing.warmup_s, inject_s, injected_s, lift_s, result.window_end_s)
            if spec.on_scheduler:
                r = analyse_scheduler_restart(
                    self.fleet.boards, samples, polls, tl, lossless=self.mode == "proxyless"
                )
            else:
                r = analyse_board_fault(
                    spec.name, board, spec.excludes, samples, polls, tl, proxyless=self.mode == "proxyless"
                )
        r.why += problems or ([] if tl else ["the fault was not injected"])
        r.passed = not r.why
        write_json(
            out_dir / "fault.json",
            {
                "fault": spec.name,
                "what": spec.what,
                "board": board,
                "concurrency": self.concurrency,
                "mode": self.mode,
                "timing": asdict(self.timing),
                "recovery_budget_s": self.timing.budget(spec),
                "timeline_s": asdict(tl) if tl else None,
                "load_errors": result.error_messages,
                "load_replayed": result.replayed,
                "result": r.as_dict(),
            },
        )
        return r


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
