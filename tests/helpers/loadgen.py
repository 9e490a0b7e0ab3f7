"""A small closed-loop load generator for the runtime's integration tests (the harness has its own)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import grpc
import numpy as np

from npudure.proto import inference_pb2 as pb


@dataclass
class LoadResult:
    latencies_s: list[float] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0

    @property
    def throughput(self) -> float:
        return len(self.latencies_s) / self.elapsed_s if self.elapsed_s else 0.0

    def p(self, q: float) -> float:
        return float(np.percentile(self.latencies_s, q)) if self.latencies_s else float("inf")


def frame_bytes(seed: int = 0) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, (640, 640, 3), dtype=np.uint8).tobytes()


async def closed_loop(address: str, concurrency: int, duration_s: float, on_tick=None) -> LoadResult:
    """``concurrency`` requests always outstanding for ``duration_s`` seconds (then drain, bounded)."""
    request = pb.InferRequest(encoding=pb.ENCODING_RAW_RGB, frame=frame_bytes()).SerializeToString()
    result = LoadResult()
    options = [("grpc.max_send_message_length", 8 << 20)]
    async with grpc.aio.insecure_channel(address, options=options) as channel:
        call = channel.unary_unary(
            "/npudure.v1.Inference/Infer", response_deserializer=pb.InferResponse.FromString
        )
        start = time.perf_counter()
        stop_at = start + duration_s

        async def worker() -> None:
            while time.perf_counter() < stop_at:
                sent = time.perf_counter()
                try:
                    reply = await call(request, timeout=15)
                except grpc.aio.AioRpcError as exc:
                    result.errors.append(f"{exc.code().name}: {exc.details()}")
                    continue
                result.latencies_s.append(time.perf_counter() - sent)
                result.nodes.append(reply.node)

        async def ticker() -> None:
            while on_tick and time.perf_counter() < stop_at:
                await asyncio.sleep(0.1)
                on_tick(time.perf_counter() - start)

        await asyncio.wait_for(
            asyncio.gather(ticker(), *(worker() for _ in range(concurrency))), duration_s + 30
        )
        result.elapsed_s = time.perf_counter() - start
    return result


def run_closed_loop(address: str, concurrency: int, duration_s: float, on_tick=None) -> LoadResult:
    return asyncio.run(closed_loop(address, concurrency, duration_s, on_tick))
