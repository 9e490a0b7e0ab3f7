"""AdminGuard's log of refused admin calls: a caller in a loop gets PERMISSION_DENIED every time, the
journal gets a line per RPC per interval and the count of the lines held back (a fake monotonic clock)."""

from __future__ import annotations

import logging

import grpc
import pytest

from npudure.config import AdminConfig
from npudure.security import access as security
from npudure.service import handlers


class _Aborted(Exception):
    pass


class _Context:
    """A servicer context without credentials; abort raises, as grpc.aio's does."""

    def __init__(self) -> None:
        self.codes: list[grpc.StatusCode] = []

    def invocation_metadata(self):
        return ()

    def auth_context(self):
        return {}

    def peer(self) -> str:
        return "ipv4:10.0.0.99:51234"

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.codes.append(code)
        raise _Aborted(details)


async def _refuse(guard: security.AdminGuard, context: _Context, rpc_name: str, times: int) -> None:
    for _ in range(times):
        with pytest.raises(_Aborted, match="is an admin call"):
            await guard.check(context, rpc_name)


async def test_refusals_in_a_loop_log_one_line_per_rpc_per_interval_with_the_count_held_back(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    now = [1000.0]
    monkeypatch.setattr(handlers.time, "monotonic", lambda: now[0])
    guard = security.AdminGuard(AdminConfig(), None)
    context = _Context()
    with caplog.at_level(logging.WARNING, logger=security.log.name):
        caplog.clear()
        await _refuse(guard, context, "SetPolicy", 6000)
        await _refuse(guard, context, "DrainNode", 3)  # another RPC: its first refusal is still logged
        now[0] += handlers.LOG_EVERY_S
        await _refuse(guard, context, "SetPolicy", 1)
    assert context.codes == [grpc.StatusCode.PERMISSION_DENIED] * 6004
    assert guard.refused == {"SetPolicy": 6001, "DrainNode": 3}
    assert [r.getMessage() for r in caplog.records] == [
        "refused admin call SetPolicy from ipv4:10.0.0.99:51234: no valid admin credentials",
        "refused admin call DrainNode from ipv4:10.0.0.99:51234: no valid admin credentials",
        "refused admin call SetPolicy from ipv4:10.0.0.99:51234: no valid admin credentials "
        "(5999 more since the last line)",
    ]
