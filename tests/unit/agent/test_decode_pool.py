"""The JPEG decode pool: a decode runs on its own threads, a full pool refuses with
RESOURCE_EXHAUSTED (the caller's to slow down, never a board fault), a slot is held until its decode
returns even when the caller went away, a decode's error reaches the caller and frees its slot, and
raw frames never enter the pool."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator

import grpc
import numpy as np
import pytest

from npudure.agent.decode_pool import DecodePool
from npudure.proto import inference_pb2 as pb
from npudure.vision import frames

pytestmark = pytest.mark.timeout(15)

JPEG = pb.ENCODING_JPEG


def _image() -> np.ndarray:
    return np.zeros((4, 4, 3), np.uint8)


class Gate:
    """A decode that blocks its thread until opened; counts the calls that started."""

    def __init__(self) -> None:
        self.open, self.started = threading.Event(), threading.Semaphore(0)
        self.threads: list[str] = []

    def work(self) -> np.ndarray:
        self.threads.append(threading.current_thread().name)
        self.started.release()
        self.open.wait(5)
        return _image()

    async def wait_started(self, count: int) -> None:
        for _ in range(count):
            assert await asyncio.to_thread(self.started.acquire, True, 5)


@contextlib.contextmanager
def pool_and_gate(threads: int, queue_limit: int) -> Iterator[tuple[DecodePool, Gate]]:
    pool, gate = DecodePool(threads, queue_limit), Gate()
    try:
        yield pool, gate
    finally:
        gate.open.set()
        pool.close()


async def serves_again(pool: DecodePool) -> None:
    """Every slot is back (the releases run on the loop) and a decode goes through."""
    for _ in range(100):
        if pool.in_flight == 0:
            break
        await asyncio.sleep(0.02)
    assert pool.in_flight == 0
    assert (await pool.run(JPEG, _image))[0].shape == (4, 4, 3)


async def test_decodes_run_on_the_pools_threads_and_come_back_with_their_time() -> None:
    with pool_and_gate(threads=2, queue_limit=1) as (pool, gate):
        image, seconds = await pool.run(JPEG, lambda: _image() + 1)
        assert image.sum() == 4 * 4 * 3 and seconds >= 0
        calls = [asyncio.create_task(pool.run(JPEG, gate.work)) for _ in range(2)]
        await gate.wait_started(2)  # both at once: two threads
        gate.open.set()
        await asyncio.gather(*calls)
        assert sorted(gate.threads) == ["decode0", "decode1"]
        await serves_again(pool)


async def test_a_full_pool_refuses_with_resource_exhausted_and_recovers() -> None:
    with pool_and_gate(threads=1, queue_limit=1) as (pool, gate):
        running = [asyncio.create_task(pool.run(JPEG, gate.work)) for _ in range(2)]  # 1 + 1 queued
        await gate.wait_started(1)
        assert pool.in_flight == pool.capacity == 2
        with pytest.raises(frames.FrameError, match="JPEG decoder is full") as refused:
            await pool.run(JPEG, gate.work)
        assert refused.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
        image, _ = await pool.run(pb.ENCODING_RAW_RGB, _image)  # raw frames skip the pool
        assert image.shape == (4, 4, 3)
        gate.open.set()
        await asyncio.gather(*running)
        await serves_again(pool)


async def test_a_cancelled_caller_keeps_its_slot_until_the_decode_returns() -> None:
    with pool_and_gate(threads=1, queue_limit=0) as (pool, gate):
        task = asyncio.create_task(pool.run(JPEG, gate.work))
        await gate.wait_started(1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        with pytest.raises(frames.FrameError, match="full"):  # its thread still decodes
            await pool.run(JPEG, _image)
        gate.open.set()
        await serves_again(pool)


async def test_a_decode_error_reaches_the_caller_and_frees_its_slot() -> None:
    def corrupt() -> np.ndarray:
        raise frames.FrameError("the JPEG is corrupt", grpc.StatusCode.INVALID_ARGUMENT)

    with pool_and_gate(threads=1, queue_limit=0) as (pool, _):
        with pytest.raises(frames.FrameError, match="corrupt"):
            await pool.run(JPEG, corrupt)
        assert pool.in_flight == 0  # released in the same loop callback that raised it here
        await serves_again(pool)
