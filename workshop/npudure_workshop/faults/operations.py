"""Operator scenarios under load: a playbook run (a rolling change, a board leaving...) while clients
send frames, in both modes at once — one closed loop through the scheduler and one proxyless, each
on its own — judged by what the issue asks of a change to a live fleet: no failed request and no
stretch of ``MAX_GAP_S`` or more without a successful reply.

The window is as long as the operation: load starts, a baseline passes, the action runs (however long
its playbook takes, up to its budget), a tail passes, and the loads stop.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np

from npudure.backends import sim_npu
from npudure_workshop.bench.payloads import FrameSet
from npudure_workshop.bench.results import write_json
from npudure_workshop.bench.samples import Samples
from npudure_workshop.faults.analysis import Column, Tally, cell, pass_fail, spec_table, with_failures
from npudure_workshop.faults.background import BackgroundLoad, Poll, StatusPoller

MAX_GAP_S = 0.5
MODES = ("scheduler", "proxyless")
# The load generator's own process is counted as stalled when its 20 ms heartbeat oversleeps this.
STALL_S = 0.25
Log = Callable[[str], None]


def gap_limit_s(time_scale: float = 1.0) -> float:
    """The longest stretch without a reply a change may cause: MAX_GAP_S on real boards; on emulated ones
    plus what the emulator stretches one frame by ((time scale - 1) x a frame alone), since a client
    waits out at least one frame in the boards' slowed time (0.73 s at the lab's time scale 10)."""
    return MAX_GAP_S + max(0.0, time_scale - 1.0) * sim_npu.FRAME_ALONE_S


class Heartbeat:
    """A 20 ms ticker in the load generator's process: when it oversleeps, the clients were not running
    either (a host starved of CPU), and a gap then says nothing about the fleet."""

    def __init__(self, t0: float, tick_s: float = 0.02) -> None:
        self.t0, self.tick_s = t0, tick_s
        self.stalls: list[tuple[float, float]] = []  # (start s since t0, length s)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="operations-heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> list[tuple[float, float]]:
        self._stop.set()
        self._thread.join(5.0)
        return list(self.stalls)

    def _run(self) -> None:
        last = time.perf_counter()
        while not self._stop.wait(self.tick_s):
            now = time.perf_counter()
            if now - last - self.tick_s > STALL_S:
                self.stalls.append((last - self.t0, now - last))
            last = now


def stalled_during(stalls: Sequence[tuple[float, float]], start: float, length: float) -> float:
    """Seconds of [start, start + length] during which the load generator itself was stalled."""
    end = start + length
    return sum(max(0.0, min(end, s + n) - max(start, s)) for s, n in stalls)


@dataclass(frozen=True)
class Window:
    """Seconds since the run's t0."""

    warmup_s: float
    action_start_s: float
    action_end_s: float
    end_s: float


@dataclass
class OperationResult(Tally):
    key: ClassVar[tuple[str, ...]] = ("scenario", "mode")
    scenario: str
    mode: str
    longest_gap_s: float | None = None  # longest stretch without a successful reply, in the window
    gap_at_s: float | None = None  # where it started, s since t0
    gap_stalled_s: float = 0.0  # of it, the load generator's own process was stalled (not the fleet)
    action_s: float | None = None
    throughput_before: float | None = None
    throughput_during: float | None = None
    # A board that joins in the action (``watch_board``): seconds from the action's end to the first
    # status poll (~100 ms apart) in which the scheduler had served a request on it; negative when it
    # served before the play ended; None when it never did in the window or none was watched.
    board_served_s: float | None = None
    # During the action, from the scheduler's status polls: the most boards out of rotation at once (any
    # state but UP or HOT: drained, down, restarting) and every board seen out. A roll one board at a
    # time shows 1 and the boards it restarted; None when no poll answered in the action.
    most_boards_out: int | None = None
    boards_out: list[str] = field(default_factory=list)
    passed: bool = False
    why: list[str] = field(default_factory=list)

    @property
    def throughput_ratio(self) -> float | None:
        if not self.throughput_before or self.throughput_during is None:
            return None
        return self.throughput_during / self.throughput_before

    def as_dict(self) -> dict:
        d = super().as_dict()
        ratio = self.throughput_ratio
        d["throughput_ratio"] = None if ratio is None else round(ratio, 3)
        return d


def longest_gap(samples: Samples, start: float, end: float) -> tuple[float, float]:
    """(length, start) of the longest stretch in [start, end] in which no request came back answered.
    The window's edges count as replies: a window that starts or ends silent shows as a gap."""
    done = np.sort(samples.done_s[samples.ok & (samples.done_s >= start) & (samples.done_s <= end)])
    edges = np.concatenate(([start], done, [end]))
    steps = np.diff(edges)
    i = int(np.argmax(steps))
    return float(steps[i]), float(edges[i])


def first_served_s(polls: Sequence[Poll], board: str, after_s: float) -> float | None:
    """The time (s since t0) of the first poll from ``after_s`` on in which the scheduler reports a
    request served on ``board`` (its count starts at 0 when the board joins its set); None if none."""
    for poll in polls:
        if poll.t_s >= after_s and poll.served.get(board, 0) > 0:
            return poll.t_s
    return None


IN_ROTATION = ("UP", "HOT")


def boards_out(polls: Sequence[Poll], start_s: float, end_s: float) -> tuple[int | None, list[str]]:
    """(the most boards out of rotation in one poll, every board out in some poll) for the polls in
    [start_s, end_s] the scheduler answered; (None, []) when it answered none."""
    most: int | None = None
    seen: set[str] = set()
    for poll in polls:
        if poll.states is None or not start_s <= poll.t_s <= end_s:
            continue
        out = {board for board, state in poll.states.items() if state not in IN_ROTATION}
        most = max(most or 0, len(out))
        seen |= out
    return most, sorted(seen)


def _rate(samples: Samples, start: float, end: float) -> float | None:
    if end - start < 0.2:
        return None
    return float((samples.ok & (samples.done_s >= start) & (samples.done_s < end)).sum()) / (end - start)


def analyse_operation(
    scenario: str,
    mode: str,
    samples: Samples,
    window: Window,
    action_error: str | None = None,
    stalls: Sequence[tuple[float, float]] = (),
    time_scale: float = 1.0,
) -> OperationResult:
    """A gap fails the scenario unless the load generator was itself stalled for most of it (then the
    clients could not have sent or seen anything: a host starved of CPU, shown in the table)."""
    r = OperationResult(scenario, mode)
    r.count(samples)
    r.longest_gap_s, r.gap_at_s = longest_gap(samples, window.warmup_s, window.end_s)
    r.action_s = window.action_end_s - window.action_start_s
    r.throughput_before = _rate(samples, window.warmup_s, window.action_start_s)
    r.throughput_during = _rate(samples, window.action_start_s, window.action_end_s)
    if action_error:
        r.why.append(action_error)
    if r.failed:
        codes = ", ".join(f"{k} x{v}" for k, v in r.error_codes.items())
        r.why.append(f"{r.failed} client request(s) failed ({codes})")
    r.gap_stalled_s = stalled_during(stalls, r.gap_at_s, r.longest_gap_s)
    limit = gap_limit_s(time_scale)
    if r.longest_gap_s >= limit and r.longest_gap_s - r.gap_stalled_s >= limit:
        r.why.append(
            f"no successful reply for {r.longest_gap_s:.2f} s from t={r.gap_at_s:.1f} s "
            f"(the limit is {limit:.2f} s{'' if time_scale == 1.0 else f' at time scale {time_scale:g}'})"
        )
    r.passed = not r.why
    return r


def run_operation(
    scheduler: str,
    scenario: str,
    action: Callable[[], object],
    frames: FrameSet,
    concurrency: int,
    out_dir: Path,
    baseline_s: float = 5.0,
    tail_s: float = 3.0,
    budget_s: float = 600.0,
    warmup_s: float = 1.0,
    modes: Sequence[str] = MODES,
    log: Log = print,
    watch_board: str | None = None,
    time_scale: float = 1.0,
) -> list[OperationResult]:
    """``action`` (e.g. a playbook run) under one closed loop per mode at ``concurrency`` each.
    ``watch_board``: a board the action adds; each result says when it first served (board_served_s).
    ``time_scale``: the emulated boards' (the gap limit follows it: :func:`gap_limit_s`)."""
    t0 = time.perf_counter()
    stop = threading.Event()
    span = baseline_s + budget_s + tail_s
    loads = {
        mode: BackgroundLoad(
            scheduler, frames.requests, concurrency, warmup_s, span, t0, mode=mode, stop=stop
        )
        for mode in modes
    }
    poller = StatusPoller(scheduler, t0)
    heartbeat = Heartbeat(t0)
    heartbeat.start()
    poller.start()
    for load in loads.values():
        load.start()
    action_error = None
    start_s = end_s = None
    try:
        time.sleep(warmup_s + baseline_s)
        dead = [m for m, load in loads.items() if not load.is_alive()]
        if dead:
            raise RuntimeError(f"the {'/'.join(dead)} load generator stopped before the action")
        start_s = time.perf_counter() - t0
        log(f"{scenario}: running the action under load ({', '.join(modes)}, concurrency {concurrency} each)")
        try:
            action()
        except Exception as exc:  # the action's own failure is a result, not a crash of the run
            action_error = (
                f"the action failed: {str(exc).strip().splitlines()[0] if str(exc).strip() else exc!r}"
            )
        end_s = time.perf_counter() - t0
        time.sleep(tail_s)
    finally:
        stop.set()
        results = {mode: load.join() for mode, load in loads.items()}
        polls = poller.stop()
        stalls = heartbeat.stop()
    out: list[OperationResult] = []
    for mode, result in results.items():
        assert start_s is not None and end_s is not None
        window = Window(warmup_s, start_s, end_s, result.window_end_s)
        result.samples.save(out_dir / f"samples-{mode}.npz")
        r = analyse_operation(scenario, mode, result.samples, window, action_error, stalls, time_scale)
        if watch_board is not None:
            served_at = first_served_s(polls, watch_board, start_s)
            r.board_served_s = None if served_at is None else served_at - end_s
        r.most_boards_out, r.boards_out = boards_out(polls, start_s, end_s)
        out.append(r)
        write_json(
            out_dir / f"{scenario}-{mode}.json",
            {
                "scenario": scenario,
                "mode": mode,
                "concurrency": concurrency,
                "window_s": asdict(window),
                "load_errors": result.error_messages,
                "load_replayed": result.replayed,
                "polls": len(polls),
                "load_generator_stalls_s": [[round(a, 3), round(b, 3)] for a, b in stalls],
                "result": r.as_dict(),
            },
        )
    return out


def _ratio(r: OperationResult) -> str:
    return "-" if r.throughput_ratio is None else f"{r.throughput_ratio:.0%}"


COLUMNS: tuple[Column[OperationResult], ...] = (
    ("scenario", 0, lambda r: r.scenario),
    ("mode", 0, lambda r: r.mode),
    ("requests", 0, lambda r: str(r.requests)),
    ("failed", 0, lambda r: str(r.failed)),
    ("longest gap s", 0, lambda r: cell(r.longest_gap_s)),
    ("of it stalled s", 0, lambda r: cell(r.gap_stalled_s)),
    ("action s", 0, lambda r: cell(r.action_s, 1)),
    ("req/s before", 0, lambda r: cell(r.throughput_before, 1)),
    ("req/s during", 0, lambda r: cell(r.throughput_during, 1)),
    ("during/before", 0, _ratio),
    ("boards out at once", 0, lambda r: "-" if r.most_boards_out is None else str(r.most_boards_out)),
    ("verdict", 0, lambda r: pass_fail(r.passed)),
)


def table(results: Sequence[OperationResult]) -> str:
    lines = spec_table(COLUMNS, results)
    return with_failures(lines, [f"  {r.scenario} ({r.mode}): {why}" for r in results for why in r.why])
