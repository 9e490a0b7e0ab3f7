"""``npudure bench --api http``: the same load through the scheduler's DeepStack-compatible HTTP API.

``HttpTarget`` stands in for ``load.Target``: it posts JPEGs (multipart bodies built once per frame,
so the generator stays cheap) over kept-alive aiohttp connections and hands the load generator what
it collects from gRPC — the response as InferResponse bytes (board, backend, stage timing from the
API's ``timing`` field) or an ``AioRpcError`` with the status the HTTP answer stands for — so every
sample, statistic and validity check of the harness works unchanged.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Awaitable
from typing import TYPE_CHECKING

import grpc

from npudure.client.opening import ClosedOnFailure, Unreachable
from npudure.proto import inference_pb2 as pb
from npudure.proto import timing as stage_timing
from npudure.vision.frames import encode_jpeg, synthetic_frame
from npudure_workshop.bench.payloads import FrameSet, FrameSourceError

if TYPE_CHECKING:  # imported when opened: the gRPC-only harness does not need aiohttp
    import aiohttp

# HTTP statuses of the API as the gRPC codes the harness counts.
_CODES = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    401: grpc.StatusCode.UNAUTHENTICATED,
    403: grpc.StatusCode.PERMISSION_DENIED,
    408: grpc.StatusCode.DEADLINE_EXCEEDED,
    413: grpc.StatusCode.RESOURCE_EXHAUSTED,
    503: grpc.StatusCode.UNAVAILABLE,
    504: grpc.StatusCode.DEADLINE_EXCEEDED,
}


def parse_size(text: str) -> tuple[int, int]:
    """``320`` or ``1280x720`` -> (width, height)."""
    match = re.fullmatch(r"(\d+)(?:x(\d+))?", text.strip())
    if not match:
        raise FrameSourceError(f"--http-image-size {text!r}: use N (square) or WxH, e.g. 320 or 1280x720")
    w = int(match.group(1))
    h = int(match.group(2) or w)
    if not (16 <= w <= 8192 and 16 <= h <= 8192):
        raise FrameSourceError(f"--http-image-size {text!r}: each side must be 16 to 8192 pixels")
    return w, h


def http_frame_set(size: tuple[int, int], count: int = 16, seed: int = 0, quality: int = 75) -> FrameSet:
    """``count`` seeded synthetic JPEGs of ``size`` (quality 75: PIL's default, what Frigate sends);
    the FrameSet's requests are the JPEG files themselves."""
    w, h = size
    jpegs = []
    for i in range(count):
        frame = synthetic_frame(seed * 100_003 + i, max(w, h))[:h, :w]
        jpegs.append(encode_jpeg(frame, quality))
    source = f"synthetic {w}x{h} JPEG (quality {quality}), seed {seed} ({count} frames), via the HTTP API"
    return FrameSet(tuple(jpegs), tuple(len(j) for j in jpegs), "jpeg", source)


def default_url(target: str) -> str:
    """The detection URL on the scheduler's host at the API's default port."""
    return f"http://{target.rpartition(':')[0]}:50080/v1/vision/detection"


def multipart(image: bytes, api_key: str = "") -> tuple[bytes, str]:
    """A DeepStack request body (fields ``image`` and ``api_key``) and its Content-Type."""
    boundary = uuid.uuid4().hex
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="api_key"\r\n\r\n{api_key}\r\n'.encode(),
        f'--{boundary}\r\nContent-Disposition: form-data; name="image"; filename="frame.jpg"\r\n'
        "Content-Type: image/jpeg\r\n\r\n".encode(),
        image,
        f"\r\n--{boundary}--\r\n".encode(),
    ]
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


def to_response(body: dict) -> bytes:
    """The API's JSON answer as the InferResponse bytes the harness parses after the run."""
    return pb.InferResponse(
        node=str(body.get("processedBy", "")),
        backend=str(body.get("backend", "")),
        emulated=bool(body.get("emulated", False)),
        attempts=int(body.get("attempts", 1)),
        timing=stage_timing.from_dict(body.get("timing")),
    ).SerializeToString()


def rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details=details)


class HttpTarget(ClosedOnFailure):
    """The load generator's target, through the HTTP API at ``url`` (…/v1/vision/detection)."""

    def __init__(self, url: str, connections: int = 2, api_key: str = "") -> None:
        self.address = url
        self.connections = max(1, connections)
        self._api_key = api_key
        self._bodies: dict[bytes, tuple[bytes, str]] = {}
        self._session: aiohttp.ClientSession | None = None

    async def _connect(self, ready_timeout_s: float) -> None:
        import aiohttp

        # No per-host limit: in a closed loop at concurrency c, c requests are out at once (as with
        # gRPC, whose channels multiplex them); connections are kept alive and reused.
        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        ping = re.sub(r"/v1/vision/detection$", "/v1/server/status/ping", self.address)
        try:
            async with self._session.get(ping, timeout=aiohttp.ClientTimeout(ready_timeout_s)) as reply:
                await reply.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise Unreachable(
                f"cannot reach the HTTP API at {self.address} ({exc or type(exc).__name__}): is http_api "
                "on in the scheduler config, and is --http-url its detection URL?"
            ) from None

    async def close(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    def infer(self, payload: bytes, timeout_s: float) -> Awaitable[bytes]:
        body = self._bodies.get(payload)
        if body is None:
            body = self._bodies[payload] = multipart(payload, self._api_key)
        return self._post(body, timeout_s)

    async def _post(self, body: tuple[bytes, str], timeout_s: float) -> bytes:
        import aiohttp

        assert self._session is not None, "HttpTarget not open"
        data, content_type = body
        try:
            async with self._session.post(
                self.address,
                data=data,
                headers={"Content-Type": content_type},
                timeout=aiohttp.ClientTimeout(total=timeout_s),
            ) as reply:
                text = await reply.read()
                status = reply.status
        except TimeoutError:
            raise rpc_error(
                grpc.StatusCode.DEADLINE_EXCEEDED, f"no HTTP answer within {timeout_s:g}s"
            ) from None
        except aiohttp.ClientError as exc:
            raise rpc_error(grpc.StatusCode.UNAVAILABLE, f"HTTP: {exc}") from None
        try:
            answer = json.loads(text)
        except ValueError:
            answer = {"error": text[:200].decode(errors="replace")}
        if status != 200 or not answer.get("success"):
            code = _CODES.get(status, grpc.StatusCode.UNKNOWN)
            raise rpc_error(code, f"HTTP {status}: {answer.get('error', '')}")
        return to_response(answer)
