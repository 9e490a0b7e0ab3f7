"""The agent's worker pool in-process, with fake contexts: the queue limit, and one frame per context at a
time even when the caller gives up mid-inference."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

import pytest
from helpers.pool import FRAME, GatedContext

from npudure.agent.pool import PoolFull, WorkerPool

# A pool that never frees its context fails the test instead of hanging it.
pytestmark = pytest.mark.timeout(15)


async def started(ctx: GatedContext) -> None:
    await asyncio.to_thread(ctx.started.wait, 5)


@contextlib.contextmanager
def gated_pool(queue_limit: int) -> Iterator[tuple[GatedContext, WorkerPool]]:
    """A pool of one gated context; on the way out the gate opens and the pool closes."""
    ctx = GatedContext()
    pool = WorkerPool([ctx], queue_limit=queue_limit)
    try:
        yield ctx, pool
    finally:
        ctx.gate.set()
        pool.close()


async def test_full_pool_refuses_beyond_the_queue_limit() -> None:
    with gated_pool(queue_limit=1) as (ctx, pool):
        running = asyncio.create_task(pool.run(FRAME))
        await started(ctx)
        waiting = asyncio.create_task(pool.run(FRAME))
        await asyncio.sleep(0.01)
        assert pool.waiting == 1 and pool.busy == 1
        with pytest.raises(PoolFull):
            await pool.run(FRAME)
        ctx.gate.set()
        await asyncio.gather(running, waiting)
        assert ctx.runs == 2 and pool.waiting == 0 and pool.busy == 0


async def test_a_cancelled_request_never_lets_a_context_serve_two_frames() -> None:
    with gated_pool(queue_limit=4) as (ctx, pool):
        first = asyncio.create_task(pool.run(FRAME))
        await started(ctx)
        first.cancel()  # the client gave up; the NPU is still busy with its frame
        await asyncio.gather(first, return_exceptions=True)
        second = asyncio.create_task(pool.run(FRAME))
        await asyncio.sleep(0.05)
        assert not second.done(), "the second frame ran while the context was still busy"
        assert ctx.max_active == 1
        ctx.gate.set()
        outcome = await second
        assert outcome.queue_s > 0.04  # it waited for the first frame's thread to finish
        assert ctx.max_active == 1 and ctx.runs == 2


async def test_each_context_runs_on_its_own_thread_and_a_busy_one_reads_as_hung_after_the_timeout() -> None:
    contexts = [GatedContext(), GatedContext()]
    pool = WorkerPool(contexts, queue_limit=4)
    try:
        tasks = [asyncio.create_task(pool.run(FRAME)) for _ in range(2)]
        for ctx in contexts:
            await started(ctx)
        assert pool.busy == 2
        await asyncio.sleep(0.05)
        assert pool.hung(0.01) == 2 and pool.hung(60) == 0
        for ctx in contexts:
            ctx.gate.set()
        await asyncio.gather(*tasks)
        assert [c.runs for c in contexts] == [1, 1]
        assert pool.hung(0.0) == 0
    finally:
        for ctx in contexts:
            ctx.gate.set()
        pool.close()
