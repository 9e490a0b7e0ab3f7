"""The fault suite and the soak on the emulated fleet (root), plus the suite's own arithmetic.

The fleet tests provision playbooks/site.yml onto three systemd-nspawn boards and a scheduler host,
run a short fault suite — all six faults: agent kill, board reboot, link cut, slow board (sim cap and
a host cgroup CPU quota), NPU hang, scheduler restart — under closed-loop load, and a 1-minute soak.
A lab that is already up with the same shape is reused and left running; otherwise one is booted
and taken down at the end. About 6-7 minutes:
    sudo .venv/bin/pytest -m lab tests/appliance/test_faults_fleet.py
The other tests (timelines made up by hand) need nothing and run in a second.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from helpers.lab_fleet import provisioned

from npudure.proto import inference_pb2 as pb
from npudure_workshop.bench.samples import from_raw
from npudure_workshop.faults.analysis import (
    Timeline,
    analyse_board_fault,
    analyse_scheduler_restart,
    table,
)
from npudure_workshop.faults.background import Poll
from npudure_workshop.faults.runner import pick_boards
from npudure_workshop.faults.scenarios import FAULTS, parse_faults
from npudure_workshop.faults.soak import Bounds, ProcSample, parse_probe, verdict

UNAVAILABLE = grpc.StatusCode.UNAVAILABLE.value[0]
DEADLINE = grpc.StatusCode.DEADLINE_EXCEEDED.value[0]


def _samples(rows: list[tuple[float, float, int, str | None, int]]):
    """rows: (sent_s, done_s, status code, serving board or None, attempts)."""
    responses = [
        pb.InferResponse(node=node, attempts=attempts, emulated=True, backend="sim").SerializeToString()
        if node
        else None
        for _, _, _, node, attempts in rows
    ]
    sent = [r[0] for r in rows]
    return from_raw(sent, sent, [r[1] for r in rows], [r[2] for r in rows], responses)


def _polls(spec: list[tuple[float, dict[str, str] | None]]) -> list[Poll]:
    return [Poll(t, states, {}) for t, states in spec]


def _steady(start: float, end: float, step: float, boards: list[str]) -> list[tuple]:
    rows, t, i = [], start, 0
    while t < end:
        rows.append((t, t + 0.1, 0, boards[i % len(boards)], 1))
        t += step
        i += 1
    return rows


UP3 = {"board1": "UP", "board2": "UP", "board3": "UP"}


# ---------------------------------------------------------------- arithmetic (no lab)


def test_board_fault_row_times_exclusion_recovery_and_throughput() -> None:
    # Baseline on three boards, board2 out from 5.0 to 8.0 (lifted at 8.0), back at 8.5.
    rows = _steady(1.0, 5.0, 0.05, ["board1", "board2", "board3"])
    rows += _steady(5.0, 8.5, 0.1, ["board1", "board3"])
    rows.append((4.9, 7.2, 0, "board3", 2))  # tried board2 first, answered by board3
    rows += _steady(8.5, 10.0, 0.05, ["board2", "board1", "board3"])
    polls = _polls(
        [
            (4.0, UP3),
            (5.0, UP3),
            (5.3, {**UP3, "board2": "DOWN"}),
            (8.4, {**UP3, "board2": "DOWN"}),
            (8.6, UP3),
        ]
    )
    tl = Timeline(warmup_s=1.0, inject_s=5.0, injected_s=5.0, lift_s=8.0, end_s=10.0)
    r = analyse_board_fault("link-cut", "board2", True, _samples(rows), polls, tl)
    assert r.passed, r.why
    assert r.failed == 0 and r.retried == 1
    assert r.excluded_after_s == pytest.approx(0.3)
    assert r.states_seen == ["DOWN"]
    assert r.back_after_s == pytest.approx(0.6)  # the request sent at 8.5, answered at 8.6
    assert r.up_after_s == pytest.approx(0.6)
    assert r.throughput_before == pytest.approx(20.0, rel=0.05)
    assert r.throughput_during == pytest.approx(10.0, rel=0.1)
    assert "link-cut" in table([r]) and "PASS" in table([r])


def test_a_failed_request_or_a_board_that_never_left_fails_the_fault() -> None:
    rows = _steady(1.0, 10.0, 0.1, ["board1", "board2"])
    rows.append((6.0, 6.2, UNAVAILABLE, None, 0))
    tl = Timeline(1.0, 5.0, 5.0, None, 10.0)
    r = analyse_board_fault("agent-kill", "board2", True, _samples(rows), _polls([(5.5, UP3)]), tl)
    assert not r.passed
    assert r.error_codes == {"UNAVAILABLE": 1}
    assert any("failed" in w for w in r.why)
    assert any("never took the board out" in w for w in r.why)
    assert "FAIL" in table([r])


def test_a_board_that_does_not_serve_again_fails_even_without_errors() -> None:
    rows = _steady(1.0, 5.0, 0.1, ["board1", "board2"]) + _steady(5.0, 12.0, 0.1, ["board1"])
    polls = _polls([(5.2, {**UP3, "board2": "DOWN"})])
    r = analyse_board_fault(
        "board-reboot", "board2", True, _samples(rows), polls, Timeline(1.0, 5.0, 7.0, None, 12)
    )
    assert not r.passed and r.back_after_s is None
    assert any("did not serve again" in w for w in r.why)


def test_scheduler_restart_accepts_unavailable_only() -> None:
    rows = _steady(1.0, 5.0, 0.1, ["board1", "board2", "board3"])
    rows += [(5.0 + i * 0.05, 5.01 + i * 0.05, UNAVAILABLE, None, 0) for i in range(20)]
    rows += _steady(7.0, 10.0, 0.1, ["board1", "board2", "board3"])
    polls = _polls([(5.1, None), (6.9, {"board1": "UP", "board2": "DOWN", "board3": "UP"}), (7.3, UP3)])
    tl = Timeline(1.0, 5.0, 6.0, None, 10.0)
    good = analyse_scheduler_restart(["board1", "board2", "board3"], _samples(rows), polls, tl)
    assert good.passed, good.why
    assert good.failed == 20 and good.error_codes == {"UNAVAILABLE": 20}
    assert good.back_after_s == pytest.approx(2.1) and good.up_after_s == pytest.approx(2.3)
    hung = [*rows, (5.0, 20.0, DEADLINE, None, 0)]
    bad = analyse_scheduler_restart(["board1", "board2", "board3"], _samples(hung), polls, tl)
    assert not bad.passed and bad.hangs == 1
    assert any("DEADLINE_EXCEEDED" in w for w in bad.why)


def test_fault_names_and_board_rotation() -> None:
    assert [f.name for f in parse_faults("all")] == list(FAULTS)
    assert [f.name for f in parse_faults("npu-hang, agent-kill")] == ["npu-hang", "agent-kill"]
    with pytest.raises(ValueError, match="unknown fault nope"):
        parse_faults("agent-kill,nope")
    specs = parse_faults("agent-kill,scheduler-restart,link-cut,npu-hang")
    assert pick_boards(specs, ["board1", "board2", "board3"]) == ["board1", "sched", "board2", "board3"]


def test_soak_verdict_bounds() -> None:
    def series(
        name: str, rss_kib: list[int], fds: list[int], pids: list[int] | None = None
    ) -> list[ProcSample]:
        pids = pids or [100] * len(rss_kib)
        return [
            ProcSample(10.0 * i, name, p, r, f)
            for i, (r, f, p) in enumerate(zip(rss_kib, fds, pids, strict=True))
        ]

    bounds = Bounds(rss_growth_pct=20, rss_growth_mib=50, fd_growth=10)
    steady = series("sched", [200_000, 60_000, 61_000, 60_500], [20, 30, 31, 30])
    leaky = series("board1", [60_000, 60_000, 70_000, 80_000], [20, 20, 25, 45])
    restarted = series("board2", [60_000, 60_000, 60_000, 60_000], [20, 20, 20, 20], [100, 100, 140, 140])
    out = {v.process: v for v in verdict(steady + leaky + restarted, warmup_s=10.0, bounds=bounds)}
    # The warm-up sample (200 MB at t=0) is not the baseline.
    assert out["sched"].passed and out["sched"].rss_growth_mib == pytest.approx(500 / 1024)
    assert not out["board1"].passed
    assert any("%" in w for w in out["board1"].why) and any("fds grew by 25" in w for w in out["board1"].why)
    assert not out["board2"].passed and any("restarted" in w for w in out["board2"].why)
    assert parse_probe("pid 231\nrss_kib 51234\nfds 17\n") == (231, 51234, 17)
    assert parse_probe("pid 0\nfds 3\n") == (None, None, None)


# ---------------------------------------------------------------- the emulated fleet


@pytest.fixture(scope="module")
def fleet(shared_lab) -> Iterator:
    with provisioned(shared_lab) as fl:  # the session's lab, shared with the other fleet module
        yield fl


@pytest.mark.lab
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_every_fault_under_load_costs_no_request(fleet, tmp_path: Path) -> None:
    from npudure_workshop.bench.payloads import make_frame_set
    from npudure_workshop.faults.runner import Suite, Timing

    specs = parse_faults("all")
    timing = Timing(baseline_s=3.0, hold_s=3.0, recovery_budget_s=12.0)
    results = Suite(fleet, make_frame_set("raw", 4, 0), 6, timing).run(specs, tmp_path)
    print(table(results))
    by_fault = {r.fault: r for r in results}
    assert set(by_fault) == set(FAULTS)
    for r in results:
        spec = FAULTS[r.fault]
        assert r.requests > 50, r
        if not spec.on_scheduler:  # a scheduler restart may refuse requests (UNAVAILABLE) while down
            assert r.failed == 0, (r.fault, r.error_codes)
        if spec.excludes:
            assert r.excluded_after_s is not None, f"{r.fault}: the scheduler never took {r.board} out"
        assert r.back_after_s is not None, f"{r.fault}: {r.board} did not serve again"
        assert r.passed, (r.fault, r.why)
    assert "DOWN" in by_fault["npu-hang"].states_seen
    # Every fault was restored: the boards are all back, the link, hang and CPU quota state is clean.
    ok, states = fleet.wait_all_up(30)
    assert ok, states
    for board in fleet.boards:
        link = fleet.lab.exec(board, ["ip", "-br", "link", "show", "eth0"], timeout=10).stdout
        assert link.split()[1] == "UP", link
    slowed = by_fault["slow"].board
    v1 = Path("/sys/fs/cgroup/cpu/npudure-lab", slowed, "cpu.cfs_quota_us")
    v2 = Path("/sys/fs/cgroup/npudure-lab", slowed, "cpu.max")
    quota = v1.read_text().strip() if v1.exists() else v2.read_text().split()[0]
    assert quota in ("-1", "max"), f"{slowed}'s CPU quota was not removed: {quota}"


@pytest.mark.lab
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_one_minute_soak_stays_within_bounds(fleet, tmp_path: Path) -> None:
    from npudure_workshop.bench.payloads import make_frame_set
    from npudure_workshop.faults.soak import report, run_soak

    soak = run_soak(fleet, make_frame_set("raw", 4, 0), 6, 1.0, tmp_path, interval_s=10.0)
    print(report(soak))
    assert {v.process for v in soak.verdicts} == {"sched", *fleet.boards}
    assert all(v.rss_start_mib and v.fds_start for v in soak.verdicts), soak.verdicts
    assert soak.requests > 500 and soak.failed == 0, soak.error_codes
    assert soak.passed, soak.why
    assert (tmp_path / "soak.csv").read_text().count("\n") >= 4 * 6
