"""A clock for retry loops that take ``clock`` and ``sleep`` callables: time moves only when the code
under test sleeps, and every pause is recorded (the backoff is asserted without waiting for it)."""

from __future__ import annotations


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.pauses: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.now += seconds
