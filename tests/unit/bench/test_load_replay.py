"""The load loops replay a call lost to a server's stop once, count it apart from errors, and replay
nothing else: a server's own UNAVAILABLE is the benchmark's to count."""

from __future__ import annotations

import grpc
import pytest
from helpers.scripted_target import LOST_TO_A_STOP, ScriptedTarget, rpc_error

from npudure.client.central import lost_to_a_server_stop
from npudure_workshop.bench.load import LoadResult, closed_loop, open_loop

UNAVAILABLE = grpc.StatusCode.UNAVAILABLE


async def _closed(target: ScriptedTarget, calls: int) -> LoadResult:
    """One worker, stopped once ``calls`` calls were made (a replay is a call)."""
    return await closed_loop(
        target,
        [b"frame"],
        1,
        warmup_s=0.0,
        duration_s=60.0,
        min_samples=0,
        timeout_s=5.0,
        stop_when=lambda: len(target.timeouts) >= calls,
    )


@pytest.mark.parametrize(
    ("code", "details", "lost"),
    [
        (UNAVAILABLE, LOST_TO_A_STOP, True),
        (grpc.StatusCode.CANCELLED, LOST_TO_A_STOP, False),  # the retry policy's own case
        (UNAVAILABLE, "Socket closed", False),  # no GOAWAY first: the server went away, not stopped
        (UNAVAILABLE, "GOAWAY received; Debug Text: max_age", False),  # an age limit: served before
        (UNAVAILABLE, "no board can take the request", False),  # the scheduler's own answer
    ],
)
def test_only_a_connection_closed_by_a_stopping_server_counts_as_lost(
    code: grpc.StatusCode, details: str, lost: bool
) -> None:
    assert lost_to_a_server_stop(rpc_error(code, details)) is lost


async def test_a_call_lost_to_a_stop_is_replayed_once_and_counted_apart() -> None:
    target = ScriptedTarget([rpc_error(UNAVAILABLE, LOST_TO_A_STOP)])
    result = await _closed(target, 4)
    assert result.error_messages == {}
    assert result.replayed == {f"UNAVAILABLE: {LOST_TO_A_STOP}": 1}
    assert bool(result.samples.ok.all())
    # Four calls, three samples: the replay is the first sample's second attempt, within its deadline.
    assert len(result.samples) == len(target.timeouts) - 1
    assert 0 < target.timeouts[1] <= target.timeouts[0] == 5.0


async def test_a_second_loss_in_a_row_is_the_samples_error() -> None:
    lost = rpc_error(UNAVAILABLE, LOST_TO_A_STOP)
    target = ScriptedTarget([lost, lost])
    result = await _closed(target, 3)
    assert result.replayed == {f"UNAVAILABLE: {LOST_TO_A_STOP}": 1}
    assert result.error_messages == {f"UNAVAILABLE: {LOST_TO_A_STOP}": 1}
    assert not bool(result.samples.ok[0]) and bool(result.samples.ok[1:].all())


async def test_the_servers_own_unavailable_is_an_error_and_not_replayed() -> None:
    target = ScriptedTarget([rpc_error(UNAVAILABLE, "no board can take the request")])
    result = await _closed(target, 3)
    assert result.replayed == {}
    assert result.error_messages == {"UNAVAILABLE: no board can take the request": 1}
    assert len(result.samples) == len(target.timeouts)


async def test_the_open_loop_replays_a_lost_call_too() -> None:
    target = ScriptedTarget([rpc_error(UNAVAILABLE, LOST_TO_A_STOP)])
    result = await open_loop(target, [b"frame"], rate=200.0, warmup_s=0.0, duration_s=0.1, timeout_s=5.0)
    assert result.error_messages == {}
    assert sum(result.replayed.values()) == 1
    assert bool(result.samples.ok.all())
