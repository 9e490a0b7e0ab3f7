"""The board monitor's health checks keep their own clock: a status poll that hangs on a frozen board
must not hold back the checks that take the board out of rotation."""

from __future__ import annotations

import asyncio

import grpc

from npudure.config import SchedulerConfig
from npudure.scheduler.boards import Board, BoardMonitor


class Unanswered:
    """A frozen board: health checks time out, status polls never come back."""

    def __init__(self) -> None:
        self.checks = 0

    async def Check(self, request, timeout):
        self.checks += 1
        raise grpc.aio.AioRpcError(
            grpc.StatusCode.DEADLINE_EXCEEDED, grpc.aio.Metadata(), grpc.aio.Metadata(), "no answer"
        )

    async def GetStatus(self, request, timeout):
        await asyncio.Event().wait()  # hangs until cancelled


async def test_a_hanging_status_poll_does_not_delay_marking_the_board_down() -> None:
    config = SchedulerConfig(
        boards=[{"name": "b1", "address": "127.0.0.1:1"}], health_interval_s=0.01, status_interval_s=0.01
    )
    board = Board(0, "b1", "127.0.0.1:1", 8)
    mon = BoardMonitor.__new__(BoardMonitor)
    mon.board, mon.config, mon._on_change, mon._on_status = board, config, lambda: None, None
    frozen = Unanswered()
    mon._health = mon._node = frozen

    task = asyncio.create_task(mon.run())
    try:
        for _ in range(500):  # up to 5 s; with the fix it takes ~3 checks of 10 ms
            if board.down:
                break
            await asyncio.sleep(0.01)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert board.down, f"still UP after {frozen.checks} health check(s)"
    assert frozen.checks >= config.failure_threshold
