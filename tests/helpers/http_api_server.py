"""The scheduler's HTTP API served in-process on loopback in front of a fake dispatcher, and multipart
bodies built byte by byte (a field that is not UTF-8, a name of any size, parts in any order).

What the API does with a request before and around the cluster is tested here without boards; what it
does with the boards is tested against a real local cluster (tests/integration/test_http_api.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from npudure.config import BoardConfig, HttpApiConfig, SchedulerConfig
from npudure.proto import inference_pb2 as pb
from npudure.scheduler.http_api import HttpApi
from npudure.scheduler.metrics import SchedulerMetrics
from npudure_workshop.lab.local import free_port

BOUNDARY = "npudure-test-boundary"
CONTENT_TYPE = f"multipart/form-data; boundary={BOUNDARY}"


class FakeDispatch:
    """Answers every forward with an empty reply from board1, or raises ``fail`` when set."""

    def __init__(self) -> None:
        self.forwarded = 0
        self.fail: Exception | None = None

    async def forward(self, request: bytes, deadline: float, model: str | None = None) -> bytes:
        """As Dispatcher.forward (``model``: the one the request names, when the caller knows it)."""
        self.forwarded += 1
        if self.fail is not None:
            raise self.fail
        return pb.InferResponse(node="board1", backend="sim").SerializeToString()


@dataclass
class FakeScheduler:
    config: SchedulerConfig
    metrics: SchedulerMetrics = field(default_factory=SchedulerMetrics)
    dispatch: FakeDispatch = field(default_factory=FakeDispatch)
    boards: list[Any] = field(default_factory=list)


@contextlib.asynccontextmanager
async def serving(tmp_path: Path, api_key: str | None = None, **http_api: Any) -> AsyncIterator[HttpApi]:
    """An HttpApi on 127.0.0.1 (its ``url``) with ``http_api`` settings and, given one, an API key."""
    key_file = None
    if api_key is not None:
        key_file = tmp_path / "api-key"
        key_file.write_text(api_key + "\n")
    api_config = HttpApiConfig(
        listen=f"127.0.0.1:{free_port()}", api_key_file=str(key_file) if key_file else None, **http_api
    )
    config = SchedulerConfig(boards=[BoardConfig(name="board1", address="127.0.0.1:1")], http_api=api_config)
    api = HttpApi(FakeScheduler(config), api_config)
    await api.start()
    try:
        yield api
    finally:
        await api.stop()


def multipart(*parts: tuple[str | bytes, bytes]) -> bytes:
    """A multipart/form-data body (boundary BOUNDARY) of ``(name, value)`` parts, in this order."""
    out = []
    for name, value in parts:
        raw_name = name.encode() if isinstance(name, str) else name
        out.append(
            b'--%s\r\nContent-Disposition: form-data; name="%s"\r\n\r\n' % (BOUNDARY.encode(), raw_name)
        )
        out.append(value + b"\r\n")
    out.append(b"--%s--\r\n" % BOUNDARY.encode())
    return b"".join(out)
