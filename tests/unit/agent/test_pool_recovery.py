"""The worker pool in process, with fake contexts: a full queue, cancellation never sharing a context, and
a hung context replaced (the same in a real agent process: tests/integration/test_hang_recovery.py)."""

from __future__ import annotations

import asyncio
import threading

import pytest
from helpers.pool import FRAME, GatedContext, wait_for

from npudure.agent.pool import Outcome, PoolFull, WorkerPool
from npudure.backends.base import Context


async def test_a_full_queue_refuses_and_counts_nothing_twice() -> None:
    gate = threading.Event()
    pool = WorkerPool([GatedContext("a", gate)], queue_limit=2)
    running = asyncio.ensure_future(pool.run(FRAME))
    await wait_for(lambda: pool.busy == 1)
    waiting = [asyncio.ensure_future(pool.run(FRAME)) for _ in range(2)]
    await wait_for(lambda: pool.waiting == 2)
    with pytest.raises(PoolFull, match="2 frames already wait"):
        await pool.run(FRAME)
    gate.set()
    await asyncio.wait_for(asyncio.gather(running, *waiting), 10)
    assert (pool.waiting, pool.busy) == (0, 0)
    pool.close()


async def test_a_cancelled_request_keeps_its_context_until_the_thread_is_done() -> None:
    gate = threading.Event()
    ctx = GatedContext("a", gate)
    pool = WorkerPool([ctx], queue_limit=8)
    first = asyncio.ensure_future(pool.run(FRAME))
    await wait_for(lambda: ctx.active == 1)
    first.cancel()  # the client gave up; the NPU call goes on
    second = asyncio.ensure_future(pool.run(FRAME))
    await asyncio.sleep(0.2)
    assert ctx.active == 1 and not second.done()  # the context is not handed out mid-call
    gate.set()
    await asyncio.wait_for(second, 10)
    assert first.cancelled() and ctx.runs == 2 and ctx.max_active == 1
    pool.close()


async def _one_hung_call() -> tuple[threading.Event, WorkerPool, asyncio.Future[Outcome]]:
    """A one-slot pool whose context blocks on ``stuck``, with one call in it, already hung."""
    stuck = threading.Event()
    pool = WorkerPool([GatedContext("a", stuck)], queue_limit=8)
    call = asyncio.ensure_future(pool.run(FRAME))
    await wait_for(lambda: pool.hung(0.0) == 1)
    return stuck, pool, call


async def test_pool_replaces_a_hung_context_and_releases_it_when_its_call_returns() -> None:
    stuck = threading.Event()
    open_gate = threading.Event()
    open_gate.set()
    old = GatedContext("old", stuck)
    made: list[GatedContext] = []

    def new_context(index: int) -> Context:
        made.append(GatedContext(f"new{index}", open_gate))
        return made[-1]

    pool = WorkerPool([old], queue_limit=8)
    hung_call = asyncio.ensure_future(pool.run(FRAME))
    await wait_for(lambda: pool.hung(0.05) == 1)
    assert pool.recover_hung(10.0, new_context) == 0  # not hung long enough yet
    await asyncio.sleep(0.1)
    assert pool.recover_hung(0.05, new_context) == 1
    assert (pool.recoveries, pool.abandoned, pool.hung(0.05), len(made)) == (1, 1, 0, 1)
    # The slot serves again while the old call is still stuck.
    for _ in range(3):
        await asyncio.wait_for(pool.run(FRAME), 10)
    assert made[0].runs == 3 and old.runs == 0 and not old.closed
    # The hung call returns: its caller gets the result, the old context is released, never reused.
    stuck.set()
    await asyncio.wait_for(hung_call, 10)
    await wait_for(lambda: old.closed)
    assert pool.abandoned == 0
    await asyncio.gather(*(pool.run(FRAME) for _ in range(4)))
    assert old.runs == 1 and made[0].runs == 7
    assert old.max_active == 1 and made[0].max_active == 1
    pool.close()
    assert made[0].closed


async def test_pool_abandons_no_more_hung_calls_than_it_has_slots() -> None:
    stuck, pool, first = await _one_hung_call()
    assert pool.recover_hung(0.0, lambda i: GatedContext("b", stuck)) == 1
    second = asyncio.ensure_future(pool.run(FRAME))
    await wait_for(lambda: pool.hung(0.0) == 1)
    # One call already abandoned on a one-slot pool: the second hang stays (health NOT_SERVING).
    assert pool.recover_hung(0.0, lambda i: GatedContext("c", stuck)) == 0
    assert pool.hung(0.0) == 1 and pool.recoveries == 1
    stuck.set()
    await asyncio.wait_for(asyncio.gather(first, second), 10)
    pool.close()


async def test_a_failing_re_creation_leaves_the_slot_hung() -> None:
    stuck, pool, call = await _one_hung_call()

    def broken(index: int) -> Context:
        raise RuntimeError("init_runtime returned -1")

    with pytest.raises(RuntimeError):
        pool.recover_hung(0.0, broken)
    assert pool.hung(0.0) == 1 and pool.recoveries == 0 and pool.abandoned == 0
    stuck.set()
    await asyncio.wait_for(call, 10)
    pool.close()
