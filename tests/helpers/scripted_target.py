"""A load target (npudure_workshop.bench.load.LoadTarget) answering from a script, for the load loops'
unit tests."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import grpc

from npudure.proto import inference_pb2 as pb

REPLY = pb.InferResponse(node="board1", backend="sim").SerializeToString()
# What C-core 1.85 raised in CI for a call whose connection a stopping scheduler closed.
LOST_TO_A_STOP = (
    "Stream removed (Socket closed (GOAWAY received; Error code: 0; Debug Text: Server shutdown))"
)


def rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details=details)


class ScriptedTarget:
    """Call i answers ``script[i]`` (an error is raised); calls past the script get ``REPLY``. Each
    call's timeout is kept in ``timeouts``."""

    def __init__(self, script: Sequence[bytes | grpc.aio.AioRpcError] = ()) -> None:
        self.script = list(script)
        self.timeouts: list[float] = []

    async def open(self, ready_timeout_s: float = 10.0) -> None:
        pass

    async def close(self) -> None:
        pass

    async def infer(self, payload: bytes, timeout_s: float) -> bytes:
        i = len(self.timeouts)
        self.timeouts.append(timeout_s)
        await asyncio.sleep(0.001)  # a call takes time; the loop's control task must get to run
        outcome = self.script[i] if i < len(self.script) else REPLY
        if isinstance(outcome, grpc.aio.AioRpcError):
            raise outcome
        return outcome
