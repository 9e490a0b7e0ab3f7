"""Bounds on what an admin call may ask for, checked before it is acted on (INVALID_ARGUMENT otherwise).

An admin's typo or a script's bug must not store a 3 MB lease holder that every GetClusterStatus then
returns, a lease that never ends (ttl inf) or has already ended (nan, negative), or a 1 MHz CPU cap.
Names are echoed in error messages, so they are bounded before anything is said about them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TypeVar

import grpc

MAX_NAME = 64  # a board name (config.BoardConfig.name)
MAX_NAMES = 1024
MAX_HOLDER = 128
DEFAULT_LEASE_S = 30.0
MAX_LEASE_S = 24 * 3600.0
# The CPU cap a board may be given, MHz (config.SimConfig.cpu_cap_mhz); cpufreq clamps within it to
# what the board's clusters can take. 0 lifts the cap.
CPU_CAP_MHZ = (100, 5000)
MAX_REASONS, MAX_REASON = 16, 64

T = TypeVar("T")


class BadInput(ValueError):
    """An admin input out of bounds, worded for the caller."""


def _name(value: str, what: str, limit: int) -> str:
    if len(value) > limit:
        raise BadInput(f"{what} is {len(value)} characters long; at most {limit}")
    if not value.isprintable():
        raise BadInput(f"{what} has control characters")
    return value


def node_name(name: str) -> str:
    return _name(name, "the board name", MAX_NAME)


def node_names(names: Sequence[str]) -> list[str]:
    if len(names) > MAX_NAMES:
        raise BadInput(f"{len(names)} board names; at most {MAX_NAMES}")
    return [node_name(n) for n in names]


def policy_name(name: str) -> str:
    return _name(name, "the policy name", MAX_NAME)


def lease(holder: str, ttl_s: float) -> float:
    """The lease's duration (``DEFAULT_LEASE_S`` for 0); the holder bounded."""
    if not holder:
        raise BadInput("a lease needs a holder name")
    _name(holder, "the lease holder", MAX_HOLDER)
    if ttl_s == 0:
        return DEFAULT_LEASE_S
    if not math.isfinite(ttl_s) or ttl_s < 0 or ttl_s > MAX_LEASE_S:
        raise BadInput(f"lease ttl_s {ttl_s} is not a number of seconds in (0, {MAX_LEASE_S:.0f}]")
    return ttl_s


def cpu_cap(mhz: int) -> int:
    low, high = CPU_CAP_MHZ
    if mhz != 0 and not low <= mhz <= high:
        raise BadInput(f"CPU cap {mhz} MHz is out of range: {low}..{high} MHz, or 0 to lift the cap")
    return mhz


def serving_reasons(reasons: Sequence[str]) -> list[str]:
    if len(reasons) > MAX_REASONS:
        raise BadInput(f"{len(reasons)} serving reasons; at most {MAX_REASONS}")
    return [_name(r, "a serving reason", MAX_REASON) for r in reasons]


async def require(context: grpc.aio.ServicerContext, check: Callable[..., T], *args: object) -> T:
    """``check(*args)``, or the call aborted with INVALID_ARGUMENT and the reason."""
    try:
        return check(*args)
    except BadInput as exc:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        raise  # unreachable: abort raises
