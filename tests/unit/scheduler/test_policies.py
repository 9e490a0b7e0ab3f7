import random
from collections import Counter
from dataclasses import dataclass

import pytest

from npudure.scheduler.policies import (
    POLICIES,
    EarliestCompletion,
    HeartbeatLeastQueue,
    LeastInflight,
    PowerOfTwoChoices,
    RoundRobin,
    make_policy,
)


@dataclass(eq=False)
class FakeBoard:
    index: int
    in_flight: int = 0
    ewma_service_s: float | None = None
    parallelism: int = 2
    polled_load: int = 0


def boards(n: int) -> list[FakeBoard]:
    return [FakeBoard(i) for i in range(n)]


def test_round_robin_cycles_and_skips_missing_candidates() -> None:
    bs = boards(3)
    rr = RoundRobin()
    assert [rr.choose(bs).index for _ in range(6)] == [0, 1, 2, 0, 1, 2]
    # Board 1 full: the cycle continues with the others, in order.
    assert [rr.choose([bs[0], bs[2]]).index for _ in range(4)] == [0, 2, 0, 2]


def test_least_inflight_picks_minimum_and_rotates_ties() -> None:
    bs = boards(3)
    bs[0].in_flight, bs[1].in_flight, bs[2].in_flight = 3, 1, 2
    li = LeastInflight()
    assert li.choose(bs) is bs[1]
    for b in bs:
        b.in_flight = 0
    picks = Counter(li.choose(bs).index for _ in range(30))
    assert set(picks) == {0, 1, 2}


def test_p2c_never_picks_the_busier_of_two() -> None:
    bs = boards(2)
    bs[0].in_flight, bs[1].in_flight = 5, 0
    p2c = PowerOfTwoChoices(random.Random(1))
    assert all(p2c.choose(bs) is bs[1] for _ in range(20))
    # With many boards the most loaded one is never chosen (it loses every pair it is in).
    many = boards(5)
    many[4].in_flight = 9
    assert all(p2c.choose(many) is not many[4] for _ in range(200))


def test_ect_weighs_service_time_and_parallelism() -> None:
    fast, slow = (
        FakeBoard(0, in_flight=3, ewma_service_s=0.010),
        FakeBoard(1, in_flight=1, ewma_service_s=0.050),
    )
    # fast: (3+1)/2*10 ms = 20 ms; slow: (1+1)/2*50 ms = 50 ms
    assert EarliestCompletion().choose([fast, slow]) is fast
    fast.in_flight = 12  # (13)/2*10 = 65 ms > 50 ms
    assert EarliestCompletion().choose([fast, slow]) is slow


def test_ect_tries_boards_without_a_sample() -> None:
    known, unknown = FakeBoard(0, in_flight=2, ewma_service_s=0.02), FakeBoard(1, in_flight=0)
    assert EarliestCompletion().choose([known, unknown]) is unknown


def test_heartbeat_policy_herds_on_stale_state() -> None:
    """Between polls, every decision goes to the board that looked idle at the last poll."""
    bs = boards(3)
    bs[0].polled_load, bs[1].polled_load, bs[2].polled_load = 4, 0, 3
    hb = HeartbeatLeastQueue()
    picks = []
    for _ in range(10):
        chosen = hb.choose(bs)
        chosen.in_flight += 1  # the scheduler's own count grows, the polled one does not
        picks.append(chosen.index)
    assert picks == [1] * 10
    # The fixed policy on the same situation spreads the same ten requests.
    for b in bs:
        b.in_flight = 0
    li = LeastInflight()
    spread = Counter()
    for _ in range(9):
        chosen = li.choose(bs)
        chosen.in_flight += 1
        spread[chosen.index] += 1
    assert spread == Counter({0: 3, 1: 3, 2: 3})


def test_make_policy_names_the_choices() -> None:
    assert set(POLICIES) == {"round_robin", "least_inflight", "p2c", "ect", "heartbeat_least_queue"}
    with pytest.raises(ValueError, match="use one of: round_robin"):
        make_policy("fastest")
