"""Admin calls that change a scheduler's state, retried while the scheduler is handing over.

During a handover the old process refuses such calls with UNAVAILABLE ("handing over to a new
scheduler; retry", ``contract.HANDING_OVER``): its successor has taken the saved state, and a change
made on the old process would be lost. The same code means a scheduler restarting. Either is over in
seconds, so the call is repeated after a doubling pause (``first_s`` up to ``max_s``) for at most
``budget_s``; any other code, or the budget spent, raises the last error.

CANCELLED is repeated too: it is what a call gets when it reaches the old process as that process
stops (gRPC cancels every call its server has not finished). The old process took no change once it
began handing over, and every call retried here is idempotent (drain, reload, lease, policy), so
asking again is safe. These callers never cancel a call themselves; their deadlines end in
DEADLINE_EXCEEDED, which is not retried.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import grpc

R = TypeVar("R")
BUDGET_S = 30.0
RETRIED = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED})


def retrying(
    call: Callable[[], R],
    budget_s: float = BUDGET_S,
    first_s: float = 0.1,
    max_s: float = 2.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> R:
    deadline = clock() + budget_s
    pause = first_s
    while True:
        try:
            return call()
        except grpc.RpcError as exc:
            if exc.code() not in RETRIED or clock() + pause > deadline:
                raise
        sleep(pause)
        pause = min(pause * 2, max_s)
