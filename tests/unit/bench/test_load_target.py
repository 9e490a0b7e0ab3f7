"""The harness's gRPC target: its channels take the environment's credentials unless told not to."""

from __future__ import annotations

import pytest
from helpers.fake_channels import ChannelRecorder

from npudure_workshop.bench import load


async def test_every_connection_is_opened_with_or_without_the_environments_credentials(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    recorder = ChannelRecorder()
    monkeypatch.setattr(load.security, "aio_channel", recorder)
    for target in (load.Target("127.0.0.1:9", 3), load.Target("127.0.0.1:8", 3, from_env=False)):
        await target.open(1.0)
        await target.close()
    assert recorder.seen == [("127.0.0.1:9", True)] * 3 + [("127.0.0.1:8", False)] * 3
