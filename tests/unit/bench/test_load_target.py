"""The harness's gRPC target: its channels take the environment's credentials unless told not to."""

from __future__ import annotations

import pytest
from helpers.fake_channels import ChannelRecorder

from npudure.bench import load


@pytest.mark.parametrize("from_env", [True, False])
async def test_every_connection_is_opened_with_or_without_the_environments_credentials(
    monkeypatch: pytest.MonkeyPatch, from_env: bool
) -> None:
    recorder = ChannelRecorder()
    monkeypatch.setattr(load.security, "aio_channel", recorder)
    target = load.Target("127.0.0.1:9", connections=3, from_env=from_env)
    await target.open(1.0)
    try:
        assert recorder.seen == [("127.0.0.1:9", from_env)] * 3
    finally:
        await target.close()
