"""The parts a benchmark session opens: the scheduler's pids, the loop bridge, the closed session."""

from __future__ import annotations

import asyncio
import os

import pytest

from npudure_workshop.bench.loop_bridge import LoopBridge
from npudure_workshop.bench.scheduler_cpu import SchedulerPids
from npudure_workshop.bench.session import BenchSession, SessionNotOpen


def test_given_pids_are_used_as_given() -> None:
    pids = SchedulerPids.find("10.0.0.1:50050", [os.getpid()])
    assert pids == SchedulerPids([os.getpid()], "given")
    window = pids.window(pids.cpu_s(), wall_s=1.0)
    assert window["status"] == "measured" and set(window["fraction_of_core_by_pid"]) == {str(os.getpid())}


def test_a_remote_scheduler_has_no_pids_and_says_why() -> None:
    pids = SchedulerPids.find("10.0.0.1:50050", None)
    assert pids.pids == [] and "another host (10.0.0.1)" in pids.reason
    assert pids.window({}, 1.0) == {"status": "unknown", "reason": pids.reason}


def test_the_bridge_runs_steps_and_cancels_what_is_left_when_closed() -> None:
    bridge = LoopBridge()
    left: list[asyncio.Task[None]] = []

    async def step() -> int:
        left.append(asyncio.get_running_loop().create_task(asyncio.sleep(60)))
        return 7

    closed: list[bool] = []

    async def last() -> None:
        closed.append(left[0].cancelled())

    assert bridge.run(step()) == 7
    bridge.close(last())
    assert closed == [True]  # pending tasks are cancelled before the last step runs


def test_a_session_not_open_says_so() -> None:
    bench = BenchSession("127.0.0.1:1")
    with pytest.raises(SessionNotOpen, match="not open"):
        _ = bench.admin
    with pytest.raises(SessionNotOpen, match="never opened"):
        bench.finish()
