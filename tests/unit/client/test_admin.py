"""The admin command's waiting and reading logic, with a fake clock (no server)."""

from __future__ import annotations

import pytest

from npudure.client.admin import AdminError, board_state, idle_reading, poll_until
from npudure.proto import inference_pb2 as pb


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


def test_poll_until_returns_the_sighting_that_ended_the_wait() -> None:
    clock, seen = Clock(), iter([(False, "2 in flight"), (False, "1 in flight"), (True, "idle")])
    assert poll_until(lambda: next(seen), 10, 0.5, clock, clock.sleep) == "idle"
    assert clock.now == pytest.approx(1.0)


def test_poll_until_times_out_naming_what_it_last_saw() -> None:
    clock = Clock()
    with pytest.raises(AdminError, match=r"still 3 in flight after 2 s") as err:
        poll_until(lambda: (False, "3 in flight"), 2, 0.5, clock, clock.sleep)
    assert err.value.code == 1 and clock.now == pytest.approx(2.0)


def test_idle_needs_nothing_in_flight_nothing_queued_and_the_reason_when_asked() -> None:
    busy = pb.NodeStatus(in_flight=1, queue_depth=0, not_serving_reasons=["drained"])
    queued = pb.NodeStatus(in_flight=0, queue_depth=2, not_serving_reasons=["drained"])
    not_told = pb.NodeStatus(in_flight=0, queue_depth=0)
    idle = pb.NodeStatus(in_flight=0, queue_depth=0, not_serving_reasons=["drained"])
    assert not idle_reading(busy, "drained").idle
    assert not idle_reading(queued, "drained").idle
    assert not idle_reading(not_told, "drained").idle and idle_reading(not_told, None).idle
    assert idle_reading(idle, "drained") == idle_reading(idle, "drained")
    assert idle_reading(idle, "drained").reasons == ("drained",)


def test_board_state_by_name() -> None:
    status = pb.ClusterStatus(
        boards=[
            pb.BoardStatus(name="board1", state=pb.BOARD_STATE_DRAINING),
            pb.BoardStatus(name="board2", state=pb.BOARD_STATE_UP),
        ]
    )
    assert board_state(status, "board1") == "DRAINING"
    assert board_state(status, "board2") == "UP"
    assert board_state(status, "board9") is None
