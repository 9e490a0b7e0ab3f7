"""Central mode (every frame through the scheduler) that rides out a scheduler restart.

A restarting scheduler first answers NOT_SERVING, then sends GOAWAY and finishes what it holds, then
is away for a second or two. ``SERVICE_CONFIG`` makes gRPC itself cope: ``waitForReady`` queues a
call while the channel reconnects instead of failing it at once, and the retry policy replays a call
that got UNAVAILABLE (the connection went away under it) with backoff. Inference is idempotent, so a
replay is safe. The same JSON works from any gRPC language (docs/proxyless.md shows it for Go/C++).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import grpc

from npudure.proto import contract
from npudure.proto import inference_pb2 as pb
from npudure.proto import inference_pb2_grpc as rpc
from npudure.security import access as security

MAX_MESSAGE_BYTES = 16 * 1024 * 1024

SERVICE_CONFIG = {
    "methodConfig": [
        {
            "name": [{"service": contract.INFERENCE}],
            "waitForReady": True,
            "retryPolicy": {
                "maxAttempts": 5,  # C-core caps it at 5
                "initialBackoff": "0.2s",
                "maxBackoff": "2s",
                "backoffMultiplier": 2,
                "retryableStatusCodes": ["UNAVAILABLE"],
            },
        }
    ]
}


def service_config(retry: bool = True) -> dict:
    """The service config; without ``retry`` only waitForReady (gRPC still replays, transparently, a
    call that never reached the server, e.g. one sent as GOAWAY arrived)."""
    if retry:
        return SERVICE_CONFIG
    method = {k: v for k, v in SERVICE_CONFIG["methodConfig"][0].items() if k != "retryPolicy"}
    return {"methodConfig": [method]}


def central_options(
    max_message_bytes: int = MAX_MESSAGE_BYTES, retry: bool = True
) -> list[tuple[str, object]]:
    """Channel arguments for a client of the scheduler (besides the target and credentials)."""
    return [
        ("grpc.service_config", json.dumps(service_config(retry))),
        ("grpc.enable_retries", 1),
        # A retry replays the request from a buffer; the default 256 KiB cannot hold a 1.2 MB frame,
        # and a call whose request does not fit is never retried.
        ("grpc.per_rpc_retry_buffer_size", 2 * max_message_bytes),
        *contract.message_size_options(max_message_bytes),
        # Reconnect within a second of the scheduler's return (the default backs off up to 2 minutes).
        *contract.reconnect_options(1000, min_ms=200),
    ]


def channel(target: str, options: Sequence[tuple[str, object]] = ()) -> grpc.Channel:
    """A blocking channel to the scheduler with the restart-tolerant config (TLS/token from env)."""
    return security.channel(target, [*central_options(), *options])


def aio_channel(target: str, options: Sequence[tuple[str, object]] = ()) -> grpc.aio.Channel:
    return security.aio_channel(target, [*central_options(), *options])


TLS_HINT = (
    f" If it speaks TLS, pass its CA and your certificate: {security.ENV_CA}, {security.ENV_CERT} and "
    f"{security.ENV_KEY} (docs/security.md)."
)


def wait_connected(channel: grpc.Channel, timeout_s: float) -> bool:
    """True once ``channel`` connects. Calls wait for a reconnect (waitForReady) instead of failing
    fast, so a wrong address would otherwise only show as a deadline: check it once up front."""
    try:
        grpc.channel_ready_future(channel).result(timeout=timeout_s)
    except grpc.FutureTimeoutError:
        return False
    return True


class Central:
    """Blocking client in central mode: ``infer(request)`` through the scheduler (``npudure.connect``
    with ``mode="central"``)."""

    def __init__(self, scheduler_target: str, *, options: Sequence[tuple[str, object]] = ()) -> None:
        self.scheduler_target = scheduler_target
        self._channel = channel(scheduler_target, options)
        self.stub = rpc.InferenceStub(self._channel)

    def infer(self, request: pb.InferRequest, timeout: float | None = None) -> pb.InferResponse:
        return self.stub.Infer(request, timeout=timeout)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> Central:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
