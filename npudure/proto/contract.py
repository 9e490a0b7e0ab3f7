"""The wire contract in one place: service and method names, board-state labels, channel option sets.

Everything that talks npudure.v1 (scheduler, agent, clients, bench, benchmarks) takes the names from
here rather than spelling them, so a rename in ``inference.proto`` is one regenerate, not a grep. The
option sets are the ones every channel must agree on with its peer (message size) or that every
long-lived channel wants (a quick reconnect after a restart); per-use options stay with their user.
Runs on the boards: Python 3.10, no controller-only imports.
"""

from __future__ import annotations

from typing import Any

from npudure.proto import inference_pb2 as pb

INFERENCE = pb.DESCRIPTOR.services_by_name["Inference"].full_name  # "npudure.v1.Inference"
NODE = pb.DESCRIPTOR.services_by_name["Node"].full_name
CLUSTER = pb.DESCRIPTOR.services_by_name["Cluster"].full_name
INFER_METHOD = f"/{INFERENCE}/Infer"

_STATE_PREFIX = "BOARD_STATE_"

# A scheduler handing over refuses changes to its state with UNAVAILABLE and this text: its successor
# has read (or is reading) the saved state, and a change made here would be lost. Clients retry.
HANDING_OVER = "handing over to a new scheduler; retry"

# gRPC's default client backoff grows to two minutes; a restarted board or scheduler is back in < 2 s.
RECONNECT_INITIAL_MS = 200
RECONNECT_MAX_MS = 2000

Options = list[tuple[str, int]]


def board_state_label(state: int) -> str:
    """``BOARD_STATE_DRAINING`` -> ``DRAINING``: the name operators read in status and logs."""
    return pb.BoardState.Name(state).removeprefix(_STATE_PREFIX)


def message_size_options(max_message_bytes: int) -> Options:
    """Send and receive limits, both ways the same: a frame the peer accepts is one this side sends."""
    return [
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.max_receive_message_length", max_message_bytes),
    ]


def reconnect_options(max_ms: int = RECONNECT_MAX_MS, *, min_ms: int | None = None) -> Options:
    """Come back quickly after the peer restarts (``min_ms`` also floors each attempt's connect time)."""
    options = [
        ("grpc.initial_reconnect_backoff_ms", RECONNECT_INITIAL_MS),
        ("grpc.max_reconnect_backoff_ms", max_ms),
    ]
    if min_ms is not None:
        options.insert(1, ("grpc.min_reconnect_backoff_ms", min_ms))
    return options


def retry_policy(
    initial_backoff: str, max_backoff: str, per_attempt_recv_timeout: str | None = None
) -> dict[str, Any]:
    """A service config's retryPolicy (gRFC A6) for Inference calls, which are idempotent.

    The most attempts C-core allows, doubling backoff, and the two codes a call gets when the process
    at the other end went away or stopped under it; callers choose the backoff and say why CANCELLED
    is safe to retry on their path.
    """
    policy: dict[str, Any] = {
        "maxAttempts": 5,  # C-core caps it at 5
        "initialBackoff": initial_backoff,
        "maxBackoff": max_backoff,
        "backoffMultiplier": 2,
        "retryableStatusCodes": ["UNAVAILABLE", "CANCELLED"],
    }
    if per_attempt_recv_timeout is not None:
        # Honoured by C-core only when the channel sets grpc.experimental.enable_hedging.
        policy["perAttemptRecvTimeout"] = per_attempt_recv_timeout
    return policy
