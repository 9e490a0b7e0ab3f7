"""A stand-in for ``security.aio_channel``: records what each channel was opened with, connects at once."""

from __future__ import annotations

from typing import Any


class FakeAioChannel:
    """What the harness's targets touch of an aio channel: ready at once, calls never made."""

    async def channel_ready(self) -> None:
        return None

    def unary_unary(self, method: str) -> str:
        return method

    async def close(self) -> None:
        return None


class ChannelRecorder:
    """Patch it over ``<module>.security.aio_channel``; ``seen`` lists (target, from_env) per channel."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, bool]] = []

    def __call__(self, target: str, options: Any = (), tls: Any = None, from_env: bool = True, **_: Any):
        self.seen.append((target, from_env))
        return FakeAioChannel()
