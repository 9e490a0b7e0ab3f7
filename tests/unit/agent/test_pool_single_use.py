"""One context, one frame at a time: under concurrent load every answer is its own frame's, and a pool
that would hand a busy context out again is refused rather than mixing answers."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest
from helpers.echo_contexts import EchoContext, EchoState, answer_for, frame

from npudure.agent.pool import ContextShared, WorkerPool

pytestmark = pytest.mark.timeout(30)


def test_the_echo_fake_shows_sharing_as_wrong_answers() -> None:
    """Without the pool's guarantee the fake does mix answers: so the tests below can fail."""
    ctx = EchoContext(delay_s=0.02)
    got: dict[int, np.ndarray] = {}
    start = threading.Barrier(2)

    def work(i: int) -> None:
        start.wait()
        got[i] = ctx.run(frame(i)).detections

    threads = [threading.Thread(target=work, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(np.array_equal(got[i], answer_for(frame(i))) for i in (0, 1)) < 2


async def test_concurrent_load_never_mixes_answers() -> None:
    contexts = [EchoContext() for _ in range(4)]
    pool = WorkerPool(contexts, queue_limit=1000)
    try:
        outcomes = await asyncio.gather(*(pool.run(frame(i)) for i in range(200)))
    finally:
        pool.close()
    wrong = [
        i for i, o in enumerate(outcomes) if not np.array_equal(o.result.detections, answer_for(frame(i)))
    ]
    assert wrong == []
    assert sum(c.runs for c in contexts) == 200 and all(c.runs > 0 for c in contexts)


def test_a_pool_given_one_context_twice_is_refused() -> None:
    ctx = EchoContext()
    with pytest.raises(ValueError, match="the same context appears twice"):
        WorkerPool([ctx, ctx], queue_limit=10)


async def test_a_busy_context_handed_out_again_is_refused_not_run() -> None:
    slow = EchoContext(delay_s=0.2)
    pool = WorkerPool([slow], queue_limit=10)
    try:
        pool._free.put_nowait(pool._workers[0])  # a bug: the one worker is on the free list twice
        first = asyncio.create_task(pool.run(frame(1)))
        await asyncio.sleep(0.05)  # the first frame is inside the context
        with pytest.raises(ContextShared, match="NPU context 0 was about to serve a second frame"):
            await pool.run(frame(2))
        outcome = await first
        assert np.array_equal(outcome.result.detections, answer_for(frame(1)))
        assert slow.runs == 1
        # Once the first frame returned the context, it serves again.
        again = await pool.run(frame(3))
        assert np.array_equal(again.result.detections, answer_for(frame(3)))
    finally:
        pool.close()


async def test_contexts_sharing_state_are_what_the_guarantee_cannot_see() -> None:
    """Distinct context objects sharing one state pass the pool's check yet mix answers: the start-up
    self-test (test_selftest.py) is what catches those."""
    common = EchoState()
    pool = WorkerPool([EchoContext(common, 0.02), EchoContext(common, 0.02)], queue_limit=10)
    try:
        outcomes = await asyncio.gather(*(pool.run(frame(i)) for i in range(4)))
    finally:
        pool.close()
    assert any(not np.array_equal(o.result.detections, answer_for(frame(i))) for i, o in enumerate(outcomes))


async def test_a_pool_whose_workers_share_one_context_is_caught_under_load() -> None:
    contexts = [EchoContext() for _ in range(4)]
    pool = WorkerPool(contexts, queue_limit=1000)
    for worker in pool._workers:  # a bug: every slot drives the first context
        worker.context = contexts[0]
    try:
        outcomes = await asyncio.gather(*(pool.run(frame(i)) for i in range(100)), return_exceptions=True)
    finally:
        pool.close()
    refused = [o for o in outcomes if isinstance(o, ContextShared)]
    answered = [(i, o) for i, o in enumerate(outcomes) if not isinstance(o, BaseException)]
    assert refused, "the shared context was handed out to two frames at once"
    assert all(np.array_equal(o.result.detections, answer_for(frame(i))) for i, o in answered)
