"""The scheduler's admin token travels only on the boards' admin calls, never on forwarded frames,
health checks or status polls (plaintext on the board network otherwise)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from npudure.config import BoardConfig, SchedulerConfig
from npudure.proto import inference_pb2 as pb
from npudure.proto import inference_pb2_grpc as rpc
from npudure.scheduler.boards import Board, open_board
from npudure.security import access as security


@asynccontextmanager
async def _board_of(
    handler: grpc.GenericRpcHandler, token_file: Path, tokens: security.AdminTokens | None = None
) -> AsyncIterator[Board]:
    """A scheduler's board channels to a real server on loopback that ``handler`` answers."""
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    config = SchedulerConfig(
        boards=[BoardConfig(name="b1", address=f"127.0.0.1:{port}")], admin={"token_file": str(token_file)}
    )
    board = open_board(0, config.boards[0], config, tokens)
    try:
        yield board
    finally:
        for ch in board.channels:
            await ch.close()
        await server.stop(None)


class _Recorder(grpc.GenericRpcHandler):
    """Answers nothing (UNIMPLEMENTED); remembers which calls carried an authorization header."""

    def __init__(self) -> None:
        self.seen: dict[str, bool] = {}

    def service(self, details):
        self.seen[details.method] = any(k == "authorization" for k, _ in details.invocation_metadata)
        return None


async def _calls(tmp_path: Path) -> dict[str, bool]:
    token = security.write_token(tmp_path / "admin-token")
    recorder = _Recorder()
    async with _board_of(recorder, token) as board:
        channel = board.channels[0]
        calls = [
            board.next_call()(b"", timeout=5),
            health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5),
            rpc.NodeStub(channel).GetStatus(pb.NodeStatusRequest(), timeout=5),
            rpc.NodeStub(channel).SetServing(pb.SetServingRequest(), timeout=5),
            rpc.NodeStub(channel).SetCpuCap(pb.SetCpuCapRequest(), timeout=5),
        ]
        for call in calls:
            try:
                await call
            except grpc.aio.AioRpcError as exc:
                assert exc.code() == grpc.StatusCode.UNIMPLEMENTED
    return recorder.seen


async def test_the_token_goes_on_admin_calls_only(tmp_path: Path) -> None:
    seen = await _calls(tmp_path)
    assert seen == {
        "/npudure.v1.Inference/Infer": False,
        "/grpc.health.v1.Health/Check": False,
        "/npudure.v1.Node/GetStatus": False,
        "/npudure.v1.Node/SetServing": True,
        "/npudure.v1.Node/SetCpuCap": True,
    }


class _Values(grpc.GenericRpcHandler):
    """Answers nothing (UNIMPLEMENTED); remembers the authorization value of each call."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    def service(self, details):
        self.sent += [v for k, v in details.invocation_metadata if k == "authorization"]
        return None


async def test_a_reloaded_token_is_what_the_boards_get_next_without_new_channels(tmp_path: Path) -> None:
    old, new = "o" * 32, "n" * 32
    path = tmp_path / "admin-token"
    path.write_text(old + "\n")
    path.chmod(0o600)
    recorder = _Values()
    tokens = security.AdminTokens(str(path))
    async with _board_of(recorder, path, tokens) as board:
        for expected in (old, new):
            if expected == new:
                path.write_text(f"{new}\n{old}\n")
                tokens.reload()
            try:
                await rpc.NodeStub(board.channels[0]).SetServing(pb.SetServingRequest(), timeout=5)
            except grpc.aio.AioRpcError as exc:
                assert exc.code() == grpc.StatusCode.UNIMPLEMENTED
    assert recorder.sent == [f"Bearer {old}", f"Bearer {new}"]
