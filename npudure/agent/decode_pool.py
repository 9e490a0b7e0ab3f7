"""JPEG decoding on its own small pool, before a frame waits for an NPU context.

A decode used to run on the NPU worker's thread, holding a context that could have been running the
previous frame. Here it runs first, on ``threads`` threads of its own, with at most ``queue_limit``
frames waiting: a burst of costly JPEGs queues (or is refused, RESOURCE_EXHAUSTED) here, and the
NPU slots keep serving frames that are already decoded. Raw frames need no decoding (a view of the
request's bytes) and skip the pool.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import grpc
import numpy as np

from npudure.proto import inference_pb2 as pb
from npudure.vision import frames


class DecodePool:
    def __init__(self, threads: int, queue_limit: int) -> None:
        self._executor = ThreadPoolExecutor(threads, "decode")
        self._slots = asyncio.Semaphore(threads + queue_limit)
        self.waiting = 0

    async def decode(self, encoding: int, work: Callable[[], np.ndarray]) -> tuple[np.ndarray, float]:
        """``work()`` (the model's input, decoded) and its time; FrameError for what the budget refuses."""
        if encoding == pb.ENCODING_RAW_RGB:
            start = time.perf_counter()
            return work(), time.perf_counter() - start
        if self._slots.locked():
            raise frames.FrameError(
                "the board's JPEG decoder is full: slow down or send raw frames",
                grpc.StatusCode.RESOURCE_EXHAUSTED,
            )
        async with self._slots:

            def job() -> tuple[np.ndarray, float]:
                start = time.perf_counter()
                return work(), time.perf_counter() - start

            # Shielded: a caller that gives up does not free the thread early; the slot waits for it.
            future = asyncio.get_running_loop().run_in_executor(self._executor, job)
            try:
                return await asyncio.shield(future)
            except asyncio.CancelledError:
                await asyncio.wait([future])
                raise

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
