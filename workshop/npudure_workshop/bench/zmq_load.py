"""``npudure bench --api zmq``: the same load through the scheduler's Frigate zmq endpoint.

``ZmqTarget`` stands in for ``load.Target`` as Frigate's detectors use the endpoint: REQ sockets, one
frame in flight each, multipart ``[header, tensor]``, a socket given up and made anew when its frame
times out. A closed loop at concurrency c keeps c sockets busy, as c Frigate detectors would. The reply
header (npudure/scheduler/zmq_tensor.py ``reply_header``) says the outcome and, for an answered frame,
the board and its stage timing; they become the InferResponse bytes or ``AioRpcError`` the harness
collects from gRPC, so every sample, statistic and validity check works unchanged.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Awaitable
from typing import TYPE_CHECKING

import grpc

from npudure.client.opening import ClosedOnFailure, Unreachable
from npudure.proto import inference_pb2 as pb
from npudure.proto import timing as stage_timing
from npudure.vision.frames import synthetic_frame
from npudure_workshop.bench.http_load import rpc_error
from npudure_workshop.bench.payloads import FrameSet, synthetic_frames

if TYPE_CHECKING:  # imported when opened: the gRPC-only harness does not need pyzmq
    import zmq.asyncio

DEFAULT_PORT = 5555  # the scheduler's zmq_api.port default (Frigate's docs use it too)


def zmq_frame_set(side: int, count: int = 16, seed: int = 0) -> FrameSet:
    """``count`` seeded synthetic ``side`` x ``side`` RGB uint8 tensors (nhwc, no batch axis), as
    Frigate sends them for a ``model:`` of that size; the FrameSet's requests are the raw tensors."""
    tensors = [frame.tobytes() for frame in synthetic_frames(count, seed, side)]
    source = f"synthetic {side}x{side} uint8 nhwc tensors, seed {seed} ({count} frames), via the zmq endpoint"
    return FrameSet(tuple(tensors), tuple(len(t) for t in tensors), "raw", source)


def default_endpoint(target: str) -> str:
    """The zmq endpoint on the scheduler's host at the endpoint's default port."""
    return f"tcp://{target.rpartition(':')[0]}:{DEFAULT_PORT}"


def request_header(tensor: bytes) -> bytes:
    """Frigate's request header for a square RGB uint8 tensor of these bytes."""
    side = math.isqrt(len(tensor) // 3)
    if side * side * 3 != len(tensor):
        raise ValueError(f"{len(tensor)} bytes are not a square RGB uint8 tensor")
    return json.dumps({"shape": [1, side, side, 3], "dtype": "uint8", "model_type": "yolo-generic"}).encode()


def to_response(header: dict[str, object]) -> bytes:
    """An answered frame's reply header as the InferResponse bytes the harness parses after the run."""
    return pb.InferResponse(
        node=str(header.get("node", "")),
        model=str(header.get("model", "")),
        backend=str(header.get("backend", "")),
        emulated=bool(header.get("emulated", False)),
        attempts=int(str(header.get("attempts", 1))),
        timing=stage_timing.from_dict(header.get("timing")),
    ).SerializeToString()


def outcome(frames: list[bytes]) -> bytes:
    """The InferResponse bytes of a reply, or the ``AioRpcError`` its header's code stands for."""
    try:
        header = json.loads(frames[0]) if len(frames) == 2 else None
    except ValueError:
        header = None
    if not isinstance(header, dict):
        raise rpc_error(
            grpc.StatusCode.UNKNOWN, f"zmq: a reply of {len(frames)} frames without a JSON header"
        )
    code = str(header.get("code", "UNKNOWN"))
    if code != "OK":
        status = grpc.StatusCode[code] if code in grpc.StatusCode.__members__ else grpc.StatusCode.UNKNOWN
        raise rpc_error(status, f"zmq: answered zeros ({code})")
    return to_response(header)


class ZmqTarget(ClosedOnFailure):
    """The load generator's target, through the zmq endpoint at ``endpoint`` (tcp://host:port)."""

    def __init__(self, endpoint: str) -> None:
        self.address = endpoint
        self._context: zmq.asyncio.Context | None = None
        self._idle: list[zmq.asyncio.Socket] = []
        self._headers: dict[int, bytes] = {}

    async def _connect(self, ready_timeout_s: float) -> None:
        import zmq.asyncio

        self._context = zmq.asyncio.Context()
        probe = synthetic_frame(0, 64).tobytes()  # one small real frame: the endpoint answers it
        try:
            await self.infer(probe, ready_timeout_s)
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise Unreachable(
                    f"no answer from the zmq endpoint at {self.address} within {ready_timeout_s:.0f}s: is "
                    "zmq_api on in the scheduler config, and is --zmq-endpoint tcp://HOST:PORT of it?"
                ) from None
            # Any other code is an answer: the endpoint is there (a board may still be starting).

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for socket in idle:
            socket.close(linger=0)
        context, self._context = self._context, None
        if context is not None:
            context.term()

    def infer(self, payload: bytes, timeout_s: float) -> Awaitable[bytes]:
        header = self._headers.get(len(payload))
        if header is None:
            header = self._headers[len(payload)] = request_header(payload)
        return self._request(header, payload, timeout_s)

    def _socket(self) -> zmq.asyncio.Socket:
        import zmq

        if self._idle:
            return self._idle.pop()
        assert self._context is not None, "ZmqTarget not open"
        socket = self._context.socket(zmq.REQ)
        socket.setsockopt(zmq.LINGER, 0)
        socket.connect(self.address)
        return socket

    async def _request(self, header: bytes, tensor: bytes, timeout_s: float) -> bytes:
        import zmq

        socket = self._socket()
        try:
            await socket.send_multipart([header, tensor], copy=False)
            frames = await asyncio.wait_for(socket.recv_multipart(), timeout_s)
        except TimeoutError:
            socket.close(linger=0)  # as Frigate does: the REQ socket is stuck, a new one takes its place
            raise rpc_error(
                grpc.StatusCode.DEADLINE_EXCEEDED, f"no zmq answer within {timeout_s:g}s"
            ) from None
        except zmq.ZMQError as exc:
            socket.close(linger=0)
            raise rpc_error(grpc.StatusCode.UNAVAILABLE, f"zmq: {exc}") from None
        except asyncio.CancelledError:
            socket.close(linger=0)
            raise
        self._idle.append(socket)
        return outcome(frames)
