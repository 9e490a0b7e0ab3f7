"""Routing policies: one small class each, scoring only state the scheduler owns.

Every policy except ``heartbeat_least_queue`` scores on the scheduler's own in-flight counters, which
it increments in the same step as the choice (no await in between, so the asyncio loop makes choice +
increment atomic). ``heartbeat_least_queue`` is kept on purpose: it scores on board state polled every
``status_interval_s`` — the reference cluster's herding bug — so the A/B can be reproduced. Between two
polls every decision sees the same stale "idle" board and they all pile onto it.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Protocol, TypeVar


class BoardView(Protocol):
    """What a policy may read about a board."""

    @property
    def index(self) -> int: ...
    @property
    def in_flight(self) -> int: ...
    @property
    def ewma_service_s(self) -> float | None: ...
    @property
    def parallelism(self) -> int: ...
    @property
    def polled_load(self) -> int: ...


B = TypeVar("B", bound=BoardView)


class Policy(ABC):
    name: str

    @abstractmethod
    def choose(self, candidates: Sequence[B]) -> B:
        """Pick one of ``candidates`` (non-empty: eligible boards with room, in board order)."""


class RoundRobin(Policy):
    name = "round_robin"

    def __init__(self) -> None:
        self._last = -1

    def choose(self, candidates: Sequence[B]) -> B:
        # The next board after the last one chosen, in board order, skipping boards that are not candidates.
        chosen = next((b for b in candidates if b.index > self._last), candidates[0])
        self._last = chosen.index
        return chosen


# Candidate sets whose tie rotation is remembered (a few per model placement and board state).
MAX_ROTATIONS = 64


class LeastInflight(Policy):
    name = "least_inflight"

    def __init__(self) -> None:
        self._rotate: dict[tuple[int, ...], int] = {}

    def choose(self, candidates: Sequence[B]) -> B:
        # Ties go round the boards rather than always to the first one; each set of candidates (a
        # model's boards) turns on its own, else requests for two models in turn would each stay on
        # one board of their set.
        key = tuple(b.index for b in candidates)
        if key not in self._rotate and len(self._rotate) >= MAX_ROTATIONS:
            self._rotate.clear()
        turn = self._rotate[key] = self._rotate.get(key, 0) + 1
        n = len(candidates)
        best = min(range(n), key=lambda i: (candidates[i].in_flight, (i - turn) % n))
        return candidates[best]


class PowerOfTwoChoices(Policy):
    name = "p2c"

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()

    def choose(self, candidates: Sequence[B]) -> B:
        if len(candidates) == 1:
            return candidates[0]
        a, b = self._rng.sample(list(candidates), 2)
        return a if a.in_flight <= b.in_flight else b


class EarliestCompletion(Policy):
    """Earliest expected completion: (in flight + this one) / parallelism × moving-average service time."""

    name = "ect"

    def __init__(self) -> None:
        self._tie = LeastInflight()

    def choose(self, candidates: Sequence[B]) -> B:
        known = [b.ewma_service_s for b in candidates if b.ewma_service_s is not None]
        # A board with no sample yet is assumed as fast as the fastest known one, so it gets tried.
        default = min(known) if known else 1.0

        scores = [
            (b.in_flight + 1)
            / max(1, b.parallelism)
            * (b.ewma_service_s if b.ewma_service_s is not None else default)
            for b in candidates
        ]
        best = min(scores)
        ties = [b for b, score in zip(candidates, scores, strict=True) if score <= best * (1 + 1e-9)]
        return ties[0] if len(ties) == 1 else self._tie.choose(ties)


class HeartbeatLeastQueue(Policy):
    """The reference's bug, kept for the A/B: least queue by periodically polled (stale) board state."""

    name = "heartbeat_least_queue"

    def choose(self, candidates: Sequence[B]) -> B:
        return min(candidates, key=lambda b: b.polled_load)


POLICIES: dict[str, type[Policy]] = {
    p.name: p for p in (RoundRobin, LeastInflight, PowerOfTwoChoices, EarliestCompletion, HeartbeatLeastQueue)
}


def make_policy(name: str) -> Policy:
    try:
        return POLICIES[name]()
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; use one of: {', '.join(POLICIES)}") from None
