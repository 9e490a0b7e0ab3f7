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
from typing import Any

import grpc

from npudure.proto import contract
from npudure.proto import inference_pb2 as pb
from npudure.proto import inference_pb2_grpc as rpc
from npudure.security import access as security

MAX_MESSAGE_BYTES = 16 * 1024 * 1024

SERVICE_CONFIG: dict[str, list[dict[str, Any]]] = {
    "methodConfig": [
        {
            "name": [{"service": contract.INFERENCE}],
            "waitForReady": True,
            # Small first: a restart's calls are replayed as soon as the new process listens,
            # not up to a second after. gRPC draws each wait at random below the current
            # backoff (jitter), so the replays of many clients do not arrive in one burst.
            # UNAVAILABLE: the connection went away under the call. CANCELLED: a scheduler that
            # stops kills the calls it had received but not yet handed to its handler
            # (grpc/grpc#41785: C-core cancels them, it does not refuse them); the scheduler never
            # answers CANCELLED otherwise (a board's CANCELLED comes back as UNAVAILABLE). A call
            # the caller cancels itself is never retried.
            "retryPolicy": contract.retry_policy("0.05s", "0.5s"),
        }
    ]
}


# Reconnect within a quarter of a second of the scheduler's return (the default backs off up to
# 2 minutes; 200 ms to 1 s here was measured as up to ~1 s more without a reply after a restart). A
# refused connect costs the scheduler's host nothing; gRPC jitters each wait by +-20%.
RECONNECT_OPTIONS: list[tuple[str, object]] = [
    ("grpc.initial_reconnect_backoff_ms", 50),
    ("grpc.max_reconnect_backoff_ms", 250),
    # The connect attempt's own timeout (gRPC's default is 20 s); a TLS handshake fits in it.
    ("grpc.min_reconnect_backoff_ms", 1000),
]


def service_config(retry: bool = True) -> dict:
    """The service config. Without ``retry`` (a benchmark that counts every error the cluster
    answers) only the restart's own casualty is replayed, CANCELLED, and waitForReady holds the rest;
    gRPC also replays, transparently, a call that never reached the server (sent as GOAWAY arrived)."""
    if retry:
        return SERVICE_CONFIG
    method = dict(SERVICE_CONFIG["methodConfig"][0])
    method["retryPolicy"] = {**method["retryPolicy"], "retryableStatusCodes": ["CANCELLED"]}
    return {"methodConfig": [method]}


# What C-core says of a call it had sent when the server, having announced its shutdown (GOAWAY "Server
# shutdown"), closed the connection without answering it: a call that met the server in the instant
# its stop began. Rare (once in a CI run's dozen handovers under load, never in 88 back to back), and
# the retry policy above replays it; Inference is idempotent, so a replay is safe.
LOST_TO_A_STOP = ("GOAWAY received", "Server shutdown")


def lost_to_a_server_stop(exc: grpc.aio.AioRpcError) -> bool:
    """True for UNAVAILABLE on a connection the server closed as it stopped (``LOST_TO_A_STOP``):
    the strict service config (``retry=False``) does not replay UNAVAILABLE, so its callers replay
    exactly this one, once, and count it."""
    details = exc.details() or ""
    return exc.code() == grpc.StatusCode.UNAVAILABLE and all(words in details for words in LOST_TO_A_STOP)


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
        *RECONNECT_OPTIONS,
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
        reply: pb.InferResponse = self.stub.Infer(request, timeout=timeout)
        return reply

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> Central:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
