"""A target whose open fails closes what it had opened and says why, without a traceback."""

from __future__ import annotations

import pytest

from npudure.client.opening import ClosedOnFailure, Unreachable


class HalfOpen(ClosedOnFailure):
    """Opens a channel, then finds the far end silent (or, with ``other``, fails some other way)."""

    def __init__(self, other: bool = False) -> None:
        self.other, self.opened, self.closed = other, 0, 0

    async def _connect(self, ready_timeout_s: float) -> None:
        self.opened += 1
        if self.other:
            raise ValueError("a bug, not an unreachable peer")
        raise Unreachable(f"nothing answered within {ready_timeout_s:.0f}s: is the scheduler running?")

    async def close(self) -> None:
        self.closed += 1


async def test_an_unreachable_peer_closes_what_was_opened_and_raises_connection_error() -> None:
    target = HalfOpen()
    why = r"^nothing answered within 3s: is the scheduler running\?$"
    with pytest.raises(ConnectionError, match=why) as exc:
        await target.open(3.0)
    assert (target.opened, target.closed) == (1, 1)
    assert exc.value.__cause__ is None and exc.value.__suppress_context__


async def test_another_failure_is_not_dressed_up_as_a_connection_error() -> None:
    target = HalfOpen(other=True)
    with pytest.raises(ValueError, match="a bug"):
        await target.open()
    assert target.closed == 0


async def test_every_load_target_opens_through_it() -> None:
    from npudure.client.proxyless import ProxylessTarget
    from npudure_workshop.bench.http_load import HttpTarget
    from npudure_workshop.bench.load import Target

    for cls in (Target, HttpTarget, ProxylessTarget):
        assert issubclass(cls, ClosedOnFailure) and "open" not in vars(cls), cls
