"""Opening a load target (the gRPC ``Target``, ``ProxylessTarget``, the HTTP target) so that a failed
open leaves nothing open behind it and the caller reads why in the user's words."""

from __future__ import annotations


class Unreachable(Exception):
    """Raised by a target's ``_connect``: the far end did not answer; the message says what to check."""


class ClosedOnFailure:
    """``open()`` runs the subclass's ``_connect``; when that fails with :class:`Unreachable`, whatever
    it had opened is closed and :class:`ConnectionError` carries the message, without a traceback."""

    async def open(self, ready_timeout_s: float = 10.0) -> None:
        try:
            await self._connect(ready_timeout_s)
        except Unreachable as exc:
            await self.close()
            raise ConnectionError(str(exc)) from None

    async def _connect(self, ready_timeout_s: float) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError
