"""The agent's job threads (an NPU context's one thread, the JPEG decoders' few): results and errors
reach the awaiting caller, one thread runs calls in order under its name, several share one queue,
and the release hook runs only once the call has returned — also when the caller went away mid-call."""

from __future__ import annotations

import asyncio
import threading

import pytest

from npudure.agent.job_threads import JobThreads

pytestmark = pytest.mark.timeout(15)


async def test_results_and_errors_come_back_in_order_on_one_thread() -> None:
    thread = JobThreads("npu7")
    returned: list[int] = []
    try:
        calls = [
            thread.submit(lambda: threading.current_thread().name, lambda i=i: returned.append(i))
            for i in range(3)
        ]
        assert await asyncio.gather(*calls) == ["npu7"] * 3
        assert returned == [0, 1, 2]

        def boom() -> None:
            raise ValueError("bad frame")

        with pytest.raises(ValueError, match="bad frame"):
            await thread.submit(boom, lambda: returned.append(9))
        assert returned[-1] == 9  # released after a failed call too
    finally:
        thread.stop(wait=True)


async def test_a_cancelled_caller_releases_only_when_the_call_returns() -> None:
    thread = JobThreads("npu0")
    gate, started = threading.Event(), threading.Event()
    released = asyncio.Event()

    def held() -> str:
        started.set()
        gate.wait(5)
        return "late"

    async def caller() -> str:
        result: str = await thread.submit(held, released.set)
        return result

    try:
        task = asyncio.create_task(caller())
        await asyncio.to_thread(started.wait, 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.05)
        assert not released.is_set()  # the call still runs: its context must not be handed out
        gate.set()
        await asyncio.wait_for(released.wait(), 5)
        assert await thread.submit(lambda: "next", lambda: None) == "next"  # the thread serves on
    finally:
        gate.set()
        thread.stop(wait=True)


async def test_a_job_whose_caller_has_gone_is_not_run_but_still_released() -> None:
    thread = JobThreads("decode")
    gate, started = threading.Event(), threading.Event()
    ran: list[str] = []
    released = asyncio.Event()
    try:
        first = thread.submit(lambda: (started.set(), gate.wait(5)), lambda: None)
        await asyncio.to_thread(started.wait, 5)  # the thread is busy: the next job queues
        queued = thread.submit(lambda: ran.append("queued"), released.set)
        queued.cancel()  # its caller's deadline passed while it queued
        gate.set()
        await first
        await asyncio.wait_for(released.wait(), 5)  # released all the same (a slot, a count)
        assert ran == []  # but the work nobody waited for was never done
        assert await thread.submit(lambda: "next", lambda: None) == "next"
    finally:
        gate.set()
        thread.stop(wait=True)


async def test_a_failing_initializer_does_not_stop_the_thread_serving() -> None:
    def refuse() -> None:
        raise OSError("sched_setaffinity refused")

    thread = JobThreads("npu1", refuse)
    try:
        assert await asyncio.wait_for(thread.submit(lambda: 42, lambda: None), 5) == 42
    finally:
        thread.stop(wait=True)


async def test_several_threads_share_one_queue_and_all_stop() -> None:
    threads = JobThreads("decode", threads=2)
    both_in, gate = threading.Barrier(2, timeout=5), threading.Event()

    def held() -> str:
        both_in.wait()  # only passes when the two calls run at once, on two threads
        gate.wait(5)
        return threading.current_thread().name

    try:
        calls = [threads.submit(held, lambda: None) for _ in range(2)]
        await asyncio.sleep(0.05)
        gate.set()
        assert sorted(await asyncio.gather(*calls)) == ["decode0", "decode1"]
    finally:
        gate.set()
        threads.stop(wait=True)
    assert not [t for t in threading.enumerate() if t.name in ("decode0", "decode1")]


def test_no_threads_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one thread"):
        JobThreads("decode", threads=0)
