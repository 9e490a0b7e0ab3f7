"""The operator scenarios' arithmetic on timelines made up by hand: failed requests, the longest
stretch without a reply, throughput before and during the action."""

from __future__ import annotations

import grpc
import pytest

from npudure.proto import inference_pb2 as pb
from npudure_workshop.bench.samples import from_raw
from npudure_workshop.faults.operations import (
    MAX_GAP_S,
    Window,
    analyse_operation,
    gap_limit_s,
    longest_gap,
    stalled_during,
    table,
)

UNAVAILABLE = grpc.StatusCode.UNAVAILABLE.value[0]


def samples(rows: list[tuple[float, float, int]]):
    """rows: (sent_s, done_s, status code)."""
    responses = [pb.InferResponse(node="board1").SerializeToString() if c == 0 else None for _, _, c in rows]
    sent = [r[0] for r in rows]
    return from_raw(sent, sent, [r[1] for r in rows], [r[2] for r in rows], responses)


def steady(start: float, end: float, step: float) -> list[tuple[float, float, int]]:
    times = [start + i * step for i in range(round((end - start) / step))]
    return [(t, t + 0.05, 0) for t in times]


def test_longest_gap_finds_the_silent_stretch_and_counts_the_edges() -> None:
    rows = steady(1.0, 5.0, 0.1) + steady(6.2, 10.0, 0.1)
    length, at = longest_gap(samples(rows), 1.0, 10.0)
    assert length == pytest.approx(6.25 - 4.95, abs=0.02) and at == pytest.approx(4.95, abs=0.02)
    # A window that ends in silence is a gap too.
    length, at = longest_gap(samples(steady(1.0, 5.0, 0.1)), 1.0, 8.0)
    assert length == pytest.approx(8.0 - 4.95, abs=0.02)
    # Failed replies do not close a gap.
    rows = steady(1.0, 5.0, 0.1) + [(5.0 + i / 10, 5.01 + i / 10, UNAVAILABLE) for i in range(10)]
    rows += steady(6.0, 8.0, 0.1)
    assert longest_gap(samples(rows), 1.0, 8.0)[0] == pytest.approx(1.1, abs=0.02)


def test_a_smooth_roll_passes_with_its_throughput_ratio() -> None:
    rows = steady(1.0, 6.0, 0.05) + steady(6.0, 20.0, 0.075) + steady(20.0, 23.0, 0.05)
    r = analyse_operation("rolling-change", "scheduler", samples(rows), Window(1.0, 6.0, 20.0, 23.0))
    assert r.passed, r.why
    assert r.failed == 0 and r.longest_gap_s < MAX_GAP_S
    assert r.throughput_before == pytest.approx(20.0, rel=0.05)
    assert r.throughput_during == pytest.approx(13.3, rel=0.05)
    assert r.throughput_ratio == pytest.approx(2 / 3, rel=0.05)
    assert r.action_s == pytest.approx(14.0)
    assert "PASS" in table([r]) and "67%" in table([r])


def test_failed_requests_a_long_gap_or_a_failed_action_fail_the_scenario() -> None:
    rows = [*steady(1.0, 6.0, 0.05), (6.0, 6.1, UNAVAILABLE), *steady(7.0, 12.0, 0.05)]
    r = analyse_operation(
        "rolling-change", "proxyless", samples(rows), Window(1.0, 5.0, 10.0, 12.0), "the action failed: rc 2"
    )
    assert not r.passed
    assert r.error_codes == {"UNAVAILABLE": 1}
    assert r.longest_gap_s == pytest.approx(1.05, abs=0.02)
    assert any("1 client request(s) failed (UNAVAILABLE x1)" in w for w in r.why)
    assert any("no successful reply for 1.05 s" in w for w in r.why)
    assert r.why[0] == "the action failed: rc 2"
    assert "FAIL" in table([r]) and "Failures:" in table([r])


def test_a_gap_while_the_load_generator_itself_stalled_is_shown_but_not_the_fleets() -> None:
    rows = [*steady(1.0, 6.0, 0.05), *steady(7.0, 12.0, 0.05)]  # silent from 6.0 to 7.05
    window = Window(1.0, 5.0, 10.0, 12.0)
    stalled = analyse_operation("rolling-change", "scheduler", samples(rows), window, stalls=[(5.98, 0.9)])
    assert stalled.passed, stalled.why
    assert stalled.gap_stalled_s == pytest.approx(0.9, abs=0.05)
    partly = analyse_operation("rolling-change", "scheduler", samples(rows), window, stalls=[(6.0, 0.3)])
    assert not partly.passed and partly.gap_stalled_s == pytest.approx(0.3, abs=0.01)
    assert stalled_during([(1.0, 1.0), (5.0, 2.0)], 1.5, 4.0) == pytest.approx(1.0)


def test_an_added_board_serves_at_the_first_poll_that_counts_a_request_on_it() -> None:
    from npudure_workshop.faults.background import Poll
    from npudure_workshop.faults.operations import first_served_s

    up = {"board1": "UP"}
    polls = [
        Poll(0.5, up, {"board1": 10}),
        Poll(1.5, {**up, "board3": "DOWN"}, {"board1": 20, "board3": 0}),
        Poll(1.6, None, {}, "UNAVAILABLE"),  # the scheduler did not answer
        Poll(1.7, {**up, "board3": "UP"}, {"board1": 30, "board3": 2}),
    ]
    assert first_served_s(polls, "board3", 1.0) == 1.7
    assert first_served_s(polls, "board3", 1.8) is None  # nothing polled after
    assert first_served_s(polls, "board9", 0.0) is None  # never in the set
    assert first_served_s(polls, "board1", 1.0) == 1.5  # a board serving before: from after_s on


def test_a_roll_counts_the_most_boards_out_at_once_in_the_action_only() -> None:
    from npudure_workshop.faults.background import Poll
    from npudure_workshop.faults.operations import boards_out

    up = {"board1": "UP", "board2": "UP", "board3": "HOT"}
    polls = [
        Poll(0.5, {**up, "board1": "DOWN", "board2": "DOWN"}, {}),  # before the action: not counted
        Poll(1.0, up, {}),
        Poll(1.5, {**up, "board1": "DRAINING"}, {}),
        Poll(1.6, None, {}, "UNAVAILABLE"),  # the scheduler handing over: no answer
        Poll(2.0, {**up, "board2": "DOWN"}, {}),
        Poll(2.5, {**up, "board3": "DRAINING"}, {}),
    ]
    assert boards_out(polls, 1.0, 2.5) == (1, ["board1", "board2", "board3"])
    assert boards_out(polls, 0.0, 1.2) == (2, ["board1", "board2"])
    assert boards_out(polls, 1.0, 1.2) == (0, [])  # HOT still serves
    assert boards_out(polls, 1.55, 1.65) == (None, [])


def test_the_gap_limit_is_the_boards_in_the_emulated_boards_time() -> None:
    """0.5 s on a board; at time scale 10 plus nine more frame times of a frame alone (26 ms each)."""
    assert gap_limit_s(1.0) == MAX_GAP_S
    assert gap_limit_s(10.0) == pytest.approx(0.5 + 9 * 0.026, abs=0.005)
    rows = [*steady(1.0, 6.0, 0.05), *steady(6.65, 12.0, 0.05)]  # silent from 6.0 to 6.70: 0.65 s
    window = Window(1.0, 5.0, 10.0, 12.0)
    assert not analyse_operation("rolling-change", "scheduler", samples(rows), window).passed
    slowed = analyse_operation("rolling-change", "scheduler", samples(rows), window, time_scale=10.0)
    assert slowed.passed, slowed.why
