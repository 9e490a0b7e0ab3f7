"""JPEG decoding on its own small pool, before a frame waits for an NPU context.

A decode used to run on the NPU worker's thread, holding a context that could have been running the
previous frame. Here it runs first, on ``threads`` threads of its own, with at most ``queue_limit``
frames waiting: a burst of costly JPEGs queues (or is refused, RESOURCE_EXHAUSTED) here, and the
NPU slots keep serving frames that are already decoded. Raw frames need no decoding (a view of the
request's bytes) and skip the pool.

Invariant: ``in_flight`` counts the decodes handed to the threads whose call has not returned. It is
taken at the hand-off and released by the call's own return (``JobThreads``' ``on_return``), so
a caller that gives up mid-decode does not free a slot whose thread is still busy decoding.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import grpc
import numpy as np

from npudure.agent.job_threads import JobThreads
from npudure.proto import inference_pb2 as pb
from npudure.vision import frames


class DecodePool:
    def __init__(self, threads: int, queue_limit: int) -> None:
        self._threads = JobThreads("decode", threads=threads)
        self.capacity = threads + queue_limit
        self.in_flight = 0

    async def run(
        self, encoding: int, work: Callable[[], np.ndarray], on_loop: bool | None = None
    ) -> tuple[np.ndarray, float]:
        """``work()`` (the decode: the model's input, e.g. :meth:`FrameJob.decode_to_input`) on a decode
        thread, and its time; FrameError when the pool is full.
        ``on_loop``: run it here (a raw frame of the model's size, a view); default: raw frames do."""
        if encoding == pb.ENCODING_RAW_RGB if on_loop is None else on_loop:
            start = time.perf_counter()
            return work(), time.perf_counter() - start
        if self.in_flight >= self.capacity:
            raise frames.FrameError(
                "the board's JPEG decoder is full: slow down or send raw frames",
                grpc.StatusCode.RESOURCE_EXHAUSTED,
            )

        def job() -> tuple[np.ndarray, float]:
            start = time.perf_counter()
            return work(), time.perf_counter() - start

        future = self._threads.submit(job, self._release)
        self.in_flight += 1  # before any release can run: releases run on this loop, after we await
        result: tuple[np.ndarray, float] = await future
        return result

    def _release(self) -> None:
        self.in_flight -= 1

    def close(self) -> None:
        self._threads.stop(wait=False)
