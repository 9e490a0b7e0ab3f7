"""Board exclusion decided from polled state: temperature limit with hysteresis, NOT_SERVING boards."""

from __future__ import annotations

import urllib.request

import pytest

from npudure.config import SchedulerConfig
from npudure.proto import inference_pb2 as pb
from npudure.scheduler.boards import Board, BoardMonitor
from npudure_workshop.lab.local import LocalCluster


class FakeNode:
    def __init__(self) -> None:
        self.temps: list[float | None] = []

    async def GetStatus(self, request, timeout):
        readings = [
            pb.Reading(name="soc", unit="C", **({} if t is None else {"value": t})) for t in self.temps
        ]
        return pb.NodeStatus(node="b1", npu_cores=2, telemetry=pb.Telemetry(thermal_c=readings))


def monitor(limit: float | None) -> tuple[Board, BoardMonitor, FakeNode]:
    config = SchedulerConfig(boards=[{"name": "b1", "address": "127.0.0.1:1"}], thermal_limit_c=limit)
    board = Board(0, "b1", "127.0.0.1:1", 8)
    mon = BoardMonitor.__new__(BoardMonitor)
    mon.board, mon.config, mon._on_change, mon._on_status = board, config, lambda: None, None
    fake = FakeNode()
    mon._node = fake
    return board, mon, fake


async def poll(mon: BoardMonitor, fake: FakeNode, *temps: float | None) -> None:
    fake.temps = list(temps)
    await mon.poll_status()


async def test_hot_board_is_excluded_and_returns_with_hysteresis() -> None:
    board, mon, fake = monitor(limit=85.0)
    await poll(mon, fake, 70.0, 84.9)
    assert not board.hot and board.eligible
    await poll(mon, fake, 86.8, 60.0)
    assert board.hot and not board.eligible and board.state == pb.BOARD_STATE_HOT
    await poll(mon, fake, 82.0)  # under the limit but within 5 degrees: stays out (no flapping)
    assert board.hot
    await poll(mon, fake, 79.0)
    assert not board.hot and board.eligible
    assert board.parallelism == 2


async def test_absent_sensors_never_exclude_a_board() -> None:
    board, mon, fake = monitor(limit=85.0)
    await poll(mon, fake, None, None)
    assert not board.hot
    board, mon, fake = monitor(limit=None)
    await poll(mon, fake, 120.0)
    assert not board.hot


@pytest.mark.parametrize("which", ["agent", "scheduler"])
def test_prometheus_metrics_are_exposed(which: str) -> None:
    from helpers.loadgen import run_closed_loop

    from npudure_workshop.lab.local import free_port

    agent_port, sched_port = free_port(), free_port()
    with LocalCluster(
        boards=1,
        time_scale=5.0,
        agent_overrides={"metrics_port": agent_port},
        scheduler_overrides={"metrics_port": sched_port},
    ) as cluster:
        run_closed_loop(cluster.address, concurrency=2, duration_s=1.0)
        port = agent_port if which == "agent" else sched_port
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    expected = (
        ["npudure_agent_requests_total", "npudure_agent_stage_seconds_bucket", "npudure_agent_hung_workers"]
        if which == "agent"
        else [
            'npudure_scheduler_requests_total{code="OK",method="Infer"}',
            'npudure_scheduler_board_in_flight{board="board1"}',
            'npudure_scheduler_stage_seconds_bucket{board="board1"',
            "npudure_scheduler_retries_total",
            'npudure_scheduler_board_state{board="board1",state="UP"} 1.0',
        ]
    )
    for name in expected:
        assert name in text, name
