"""The bounded retry of state-changing admin calls while a scheduler hands over (fake clock)."""

from __future__ import annotations

import grpc
import pytest
from helpers.fake_clock import FakeClock
from helpers.rpc_error import FakeRpcError as _Error

from npudure.client.handover_retry import retrying
from npudure.proto import contract


def _calls(*outcomes):
    made = []

    def call():
        made.append(1)
        outcome = outcomes[len(made) - 1]
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    return call, made


def test_a_scheduler_handing_over_is_asked_again_with_a_doubling_pause() -> None:
    clock = FakeClock()
    busy = _Error(grpc.StatusCode.UNAVAILABLE, f"DrainNode: {contract.HANDING_OVER}")
    call, made = _calls(busy, busy, busy, "done")
    assert retrying(call, clock=clock, sleep=clock.sleep) == "done"
    assert len(made) == 4 and clock.pauses == [0.1, 0.2, 0.4]


def test_a_call_cancelled_by_the_old_process_stopping_is_asked_again() -> None:
    # Seen in CI: `npudure admin drain` reached the old scheduler as it stopped and got CANCELLED.
    clock = FakeClock()
    busy = _Error(grpc.StatusCode.UNAVAILABLE, f"DrainNode: {contract.HANDING_OVER}")
    call, made = _calls(busy, _Error(grpc.StatusCode.CANCELLED, "CANCELLED"), "done")
    assert retrying(call, clock=clock, sleep=clock.sleep) == "done"
    assert len(made) == 3


def test_a_deadline_is_not_retried() -> None:
    clock = FakeClock()
    call, made = _calls(_Error(grpc.StatusCode.DEADLINE_EXCEEDED), "done")
    with pytest.raises(grpc.RpcError):
        retrying(call, clock=clock, sleep=clock.sleep)
    assert len(made) == 1


def test_other_errors_are_not_retried() -> None:
    clock = FakeClock()
    call, made = _calls(_Error(grpc.StatusCode.PERMISSION_DENIED), "done")
    with pytest.raises(grpc.RpcError) as caught:
        retrying(call, clock=clock, sleep=clock.sleep)
    assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED and len(made) == 1


def test_the_retry_is_bounded_and_ends_with_the_last_error() -> None:
    clock = FakeClock()
    busy = _Error(grpc.StatusCode.UNAVAILABLE, contract.HANDING_OVER)
    call, made = _calls(*[busy] * 100)
    with pytest.raises(grpc.RpcError):
        retrying(call, budget_s=5.0, max_s=1.0, clock=clock, sleep=clock.sleep)
    assert clock.now <= 5.0 and max(clock.pauses) == 1.0 and len(made) < 15
