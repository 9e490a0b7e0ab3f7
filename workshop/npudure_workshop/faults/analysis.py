"""From one fault's raw record (every request, every status poll, when the fault came and went) to its
table row and verdict. Pure functions: the tests feed them made-up timelines."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import ClassVar, TypeVar

import grpc
import numpy as np

from npudure_workshop.bench.fmt import text_table
from npudure_workshop.bench.samples import Samples
from npudure_workshop.faults.background import Poll

T = TypeVar("T")
# A printed table's column: its header, its minimum width, and how to get an item's cell.
Column = tuple[str, int, Callable[[T], str]]

# A request that took longer than this (or died of DEADLINE_EXCEEDED) during a scheduler restart hung.
HANG_S = 5.0
CODE_NAMES = {sc.value[0]: sc.name for sc in grpc.StatusCode}


@dataclass(frozen=True)
class Timeline:
    """Seconds since the run's t0."""

    warmup_s: float
    inject_s: float  # the injection started
    injected_s: float  # the injecting action returned (a reboot returns once the board is back)
    lift_s: float | None  # a held fault was lifted (None: it heals by itself)
    end_s: float  # the load stopped sending

    @property
    def recovery_from_s(self) -> float:
        """Recovery is timed from the lift, or for a self-healing fault from the injection."""
        return self.lift_s if self.lift_s is not None else self.inject_s


@dataclass(kw_only=True)
class Tally:
    """What a run's requests came to; ``key`` names the fields that say which run it was."""

    key: ClassVar[tuple[str, ...]] = ()
    requests: int = 0
    failed: int = 0  # requests that ended in an error, counted by gRPC code below
    error_codes: dict[str, int] = field(default_factory=dict)

    def count(self, samples: Samples) -> None:
        self.requests = len(samples)
        self.error_codes = error_codes(samples)
        self.failed = sum(self.error_codes.values())

    def as_dict(self) -> dict:
        """Plain values, the key first, times and rates to the millisecond (the raw data keeps full
        precision)."""
        d = {k: round(v, 3) if isinstance(v, float) else v for k, v in asdict(self).items()}
        return {k: d[k] for k in self.key} | d


@dataclass
class FaultResult(Tally):
    key: ClassVar[tuple[str, ...]] = ("fault", "board")
    fault: str
    board: str
    retried: int = 0  # answered, but by a second board after the first failed
    hangs: int = 0  # DEADLINE_EXCEEDED, or answered after more than HANG_S
    excluded_after_s: float | None = None
    states_seen: list[str] = field(default_factory=list)
    back_after_s: float | None = None  # first request sent after the lift that the board served
    up_after_s: float | None = None  # scheduler reports the board (every board) UP again
    throughput_before: float | None = None
    throughput_during: float | None = None
    passed: bool = False
    why: list[str] = field(default_factory=list)


def error_codes(samples: Samples, mask: np.ndarray | None = None) -> dict[str, int]:
    codes = samples.status_code if mask is None else samples.status_code[mask]
    counts = Counter(CODE_NAMES.get(int(c), str(int(c))) for c in codes if c != 0)
    return dict(sorted(counts.items()))


def _rate(samples: Samples, start: float, end: float) -> float | None:
    """Answered requests per second that arrived in [start, end)."""
    if end - start < 0.2:
        return None
    arrived = samples.ok & (samples.done_s >= start) & (samples.done_s < end)
    return float(arrived.sum()) / (end - start)


def _node_mask(samples: Samples, board: str) -> np.ndarray:
    if board not in samples.node_names:
        return np.zeros(len(samples), dtype=bool)
    return samples.node_idx == samples.node_names.index(board)


def first_served_after(samples: Samples, board: str | None, since: float) -> float | None:
    """When the first request sent at or after ``since`` and answered by ``board`` (any board when
    None) came back."""
    mask = samples.ok & (samples.sent_s >= since)
    if board is not None:
        mask &= _node_mask(samples, board)
    return float(samples.done_s[mask].min()) if mask.any() else None


def exclusion(polls: Sequence[Poll], board: str, since: float) -> tuple[float | None, list[str]]:
    """(first poll time at or after ``since`` with the board not UP, the non-UP states seen)."""
    first = None
    seen: list[str] = []
    for p in polls:
        if p.t_s < since or p.states is None or board not in p.states:
            continue
        state = p.states[board]
        if state != "UP":
            first = p.t_s if first is None else first
            if state not in seen:
                seen.append(state)
    return first, seen


def up_again(polls: Sequence[Poll], boards: Sequence[str], since: float) -> float | None:
    """First poll at or after ``since`` where the scheduler answered with every one of ``boards`` UP."""
    for p in polls:
        if p.t_s >= since and p.states is not None and all(p.states.get(b) == "UP" for b in boards):
            return p.t_s
    return None


def analyse_board_fault(
    fault: str,
    board: str,
    excludes: bool,
    samples: Samples,
    polls: Sequence[Poll],
    tl: Timeline,
    proxyless: bool = False,
) -> FaultResult:
    """``proxyless``: the clients balanced by themselves; the scheduler's exclusion is still shown but
    is not theirs (their health checks and keepalive pings take the board out), so not judged."""
    r = FaultResult(fault, board)
    r.count(samples)
    r.retried = int((samples.ok & (samples.attempts > 1)).sum())
    r.hangs = int(((samples.done_s - samples.sent_s) > HANG_S).sum())
    r.excluded_after_s, r.states_seen = exclusion(polls, board, tl.inject_s)
    if r.excluded_after_s is not None:
        r.excluded_after_s -= tl.inject_s
    ref = tl.recovery_from_s
    back = first_served_after(samples, board, ref)
    r.back_after_s = None if back is None else back - ref
    # "Up again" needs the board to have been out first.
    if r.excluded_after_s is not None:
        up = up_again(polls, [board], tl.inject_s + r.excluded_after_s)
        r.up_after_s = None if up is None else max(0.0, up - ref)
    r.throughput_before = _rate(samples, tl.warmup_s, tl.inject_s)
    during_end = tl.lift_s if tl.lift_s is not None else (back if back is not None else tl.end_s)
    r.throughput_during = _rate(samples, tl.inject_s, during_end)
    if r.failed:
        codes = ", ".join(f"{k} x{v}" for k, v in r.error_codes.items())
        r.why.append(f"{r.failed} client request(s) failed ({codes}) while other boards were up")
    if excludes and r.excluded_after_s is None and not proxyless:
        r.why.append("the scheduler never took the board out of rotation")
    if back is None:
        r.why.append("the board did not serve again within the recovery budget")
    r.passed = not r.why
    return r


def analyse_scheduler_restart(
    boards: Sequence[str], samples: Samples, polls: Sequence[Poll], tl: Timeline, lossless: bool = False
) -> FaultResult:
    """``lossless``: the clients did not go through the scheduler (proxyless), so no request may fail;
    through it, UNAVAILABLE while it is away is expected."""
    r = FaultResult("scheduler-restart", "sched")
    r.count(samples)
    r.retried = int((samples.ok & (samples.attempts > 1)).sum())
    deadline_exceeded = samples.status_code == grpc.StatusCode.DEADLINE_EXCEEDED.value[0]
    r.hangs = int((((samples.done_s - samples.sent_s) > HANG_S) | deadline_exceeded).sum())
    # The scheduler "excluded" nothing: the column shows when it stopped answering.
    down = next((p.t_s for p in polls if p.t_s >= tl.inject_s and p.states is None), None)
    r.excluded_after_s = None if down is None else down - tl.inject_s
    r.states_seen = ["unreachable"] if down is not None else []
    back = first_served_after(samples, None, tl.injected_s)
    r.back_after_s = None if back is None else back - tl.inject_s
    up = up_again(polls, boards, tl.injected_s)
    r.up_after_s = None if up is None else up - tl.inject_s
    r.throughput_before = _rate(samples, tl.warmup_s, tl.inject_s)
    r.throughput_during = _rate(samples, tl.inject_s, back if back is not None else tl.end_s)
    other = {k: v for k, v in r.error_codes.items() if lossless or k != "UNAVAILABLE"}
    if lossless and other:
        r.why.append(
            "proxyless requests failed although no board did: "
            + ", ".join(f"{k} x{v}" for k, v in other.items())
        )
    elif other:
        r.why.append(
            "requests failed with other codes than UNAVAILABLE: "
            + ", ".join(f"{k} x{v}" for k, v in other.items())
        )
    if r.hangs:
        r.why.append(
            f"{r.hangs} request(s) hung (DEADLINE_EXCEEDED or answered after more than {HANG_S:.0f} s)"
        )
    if back is None:
        r.why.append("no request was served after the restart within the recovery budget")
    if up is None:
        r.why.append("the boards were not all UP again within the recovery budget")
    r.passed = not r.why
    return r


# ---------------------------------------------------------------- the printed table


def cell(value: float | None, digits: int = 2) -> str:
    """A figure of the faults' terminal tables: ``-`` when there is none."""
    return "-" if value is None else f"{value:.{digits}f}"


def with_failures(lines: list[str], notes: list[str]) -> str:
    """A table's lines, then its results' reasons for failing under ``Failures:`` (if any)."""
    return "\n".join(lines + (["", "Failures:", *notes] if notes else []))


def pass_fail(passed: bool) -> str:
    return "PASS" if passed else "FAIL"


def spec_table(columns: Sequence[Column[T]], items: Sequence[T]) -> list[str]:
    """A faults terminal table from its columns: each a header, a minimum width and how to get an
    item's cell."""
    return text_table(
        [name for name, _, _ in columns],
        [[get(x) for _, _, get in columns] for x in items],
        sep=" | ",
        rule=True,
        min_widths=[w for _, w, _ in columns],
    )


def _codes(r: FaultResult) -> str:
    return ", ".join(f"{k} x{v}" for k, v in r.error_codes.items()) or "-"


COLUMNS: tuple[Column[FaultResult], ...] = (
    ("fault", 17, lambda r: r.fault),
    ("board", 6, lambda r: r.board),
    ("requests", 8, lambda r: str(r.requests)),
    ("failed", 6, lambda r: str(r.failed)),
    ("error codes", 20, _codes),
    ("retried", 7, lambda r: str(r.retried)),
    ("excluded s", 10, lambda r: cell(r.excluded_after_s)),
    ("states", 11, lambda r: "/".join(r.states_seen) or "-"),
    ("back s", 6, lambda r: cell(r.back_after_s)),
    ("up s", 6, lambda r: cell(r.up_after_s)),
    ("req/s before", 12, lambda r: cell(r.throughput_before, 1)),
    ("req/s during", 12, lambda r: cell(r.throughput_during, 1)),
    ("verdict", 7, lambda r: pass_fail(r.passed)),
)


def table(results: Sequence[FaultResult]) -> str:
    lines = spec_table(COLUMNS, results)
    return with_failures(lines, [f"  {r.fault} on {r.board}: {why}" for r in results for why in r.why])
