"""The worker pool in process, with fake contexts: a full queue, and cancellation never sharing a context."""

from __future__ import annotations

import asyncio
import threading

import pytest
from test_hang_recovery import FRAME, GatedContext, _wait_for

from npudure.agent.pool import PoolFull, WorkerPool


def test_a_full_queue_refuses_and_counts_nothing_twice() -> None:
    async def scenario() -> None:
        gate = threading.Event()
        pool = WorkerPool([GatedContext("a", gate)], queue_limit=2)
        running = asyncio.ensure_future(pool.run(lambda: FRAME))
        await _wait_for(lambda: pool.busy == 1)
        waiting = [asyncio.ensure_future(pool.run(lambda: FRAME)) for _ in range(2)]
        await _wait_for(lambda: pool.waiting == 2)
        with pytest.raises(PoolFull, match="2 frames already wait"):
            await pool.run(lambda: FRAME)
        gate.set()
        await asyncio.wait_for(asyncio.gather(running, *waiting), 10)
        assert (pool.waiting, pool.busy) == (0, 0)
        pool.close()

    asyncio.run(scenario())


def test_a_cancelled_request_keeps_its_context_until_the_thread_is_done() -> None:
    async def scenario() -> None:
        gate = threading.Event()
        ctx = GatedContext("a", gate)
        pool = WorkerPool([ctx], queue_limit=8)
        first = asyncio.ensure_future(pool.run(lambda: FRAME))
        await _wait_for(lambda: ctx.active == 1)
        first.cancel()  # the client gave up; the NPU call goes on
        second = asyncio.ensure_future(pool.run(lambda: FRAME))
        await asyncio.sleep(0.2)
        assert ctx.active == 1 and not second.done()  # the context is not handed out mid-call
        gate.set()
        await asyncio.wait_for(second, 10)
        assert first.cancelled() and ctx.runs == 2 and ctx.max_active == 1
        pool.close()

    asyncio.run(scenario())
