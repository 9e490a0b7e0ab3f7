"""A scheduler handing over refuses changes to its state (its successor has taken the saved state):
UNAVAILABLE with the text clients retry on, after the credentials check, and only for changes."""

from __future__ import annotations

import grpc
import pytest

from npudure.config import BoardConfig, SchedulerConfig
from npudure.proto import contract
from npudure.proto import inference_pb2 as pb
from npudure.scheduler import membership, route
from npudure.scheduler.server import Scheduler


class _Aborted(Exception):
    pass


class _Context:
    def __init__(self, token: str | None) -> None:
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self.aborted: tuple[grpc.StatusCode, str] | None = None

    def invocation_metadata(self):
        return self._metadata

    def auth_context(self):
        return {}

    def peer(self) -> str:
        return "ipv4:127.0.0.1:1"

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.aborted = (code, details)
        raise _Aborted


TOKEN = "t" * 32


async def _watch_nothing(self: membership.BoardMonitor) -> None:
    return None


async def _push_nowhere(self: route.ServingPusher, board: object, reasons: list[str]) -> None:
    return None


@pytest.fixture(autouse=True)
def _no_pushes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The boards' serving reasons are pushed, and a board added is health-checked, over gRPC: not to the
    boards at 127.0.0.1:1 and :2 from a unit test."""
    monkeypatch.setattr(route.ServingPusher, "_push", _push_nowhere)
    monkeypatch.setattr(membership.BoardMonitor, "run", _watch_nothing)


@pytest.fixture
async def scheduler(tmp_path):
    path = tmp_path / "admin-token"
    path.write_text(TOKEN + "\n")
    path.chmod(0o600)
    config = SchedulerConfig(
        boards=[BoardConfig(name="b1", address="127.0.0.1:1")], admin={"token_file": str(path)}
    )
    sched = Scheduler(config)
    yield sched
    await sched.close()


async def test_changes_are_refused_while_handing_over_and_taken_otherwise(scheduler: Scheduler) -> None:
    drain = pb.DrainNodeRequest(node="b1", drain=True)
    scheduler.handing_over = lambda: True
    context = _Context(TOKEN)
    with pytest.raises(_Aborted):
        await scheduler.DrainNode(drain, context)  # type: ignore[arg-type]
    assert context.aborted == (grpc.StatusCode.UNAVAILABLE, f"DrainNode: {contract.HANDING_OVER}")
    assert not scheduler.by_name["b1"].draining
    for call, request in (
        (scheduler.SetPolicy, pb.SetPolicyRequest(policy="p2c")),
        (scheduler.SetActiveNodes, pb.SetActiveNodesRequest(nodes=["b1"])),
        (scheduler.AcquireLease, pb.LeaseRequest(holder="bench")),
        (scheduler.ReleaseLease, pb.LeaseRequest(holder="bench")),
        (scheduler.ReloadBoards, pb.ReloadBoardsRequest()),
    ):
        context = _Context(TOKEN)
        with pytest.raises(_Aborted):
            await call(request, context)  # type: ignore[operator]
        assert context.aborted is not None and context.aborted[0] == grpc.StatusCode.UNAVAILABLE
    # Without credentials the answer stays PERMISSION_DENIED: a handover tells an outsider nothing.
    context = _Context("x" * 32)
    with pytest.raises(_Aborted):
        await scheduler.DrainNode(drain, context)  # type: ignore[arg-type]
    assert context.aborted is not None and context.aborted[0] == grpc.StatusCode.PERMISSION_DENIED
    # Reads go on; and once the handover failed (thawed), the change is taken.
    status = await scheduler.GetClusterStatus(pb.ClusterStatusRequest(), _Context(None))  # type: ignore[arg-type]
    assert [b.name for b in status.boards] == ["b1"]
    scheduler.handing_over = lambda: False
    await scheduler.DrainNode(drain, _Context(TOKEN))  # type: ignore[arg-type]
    assert scheduler.by_name["b1"].draining


async def test_a_reload_that_a_handover_overtakes_while_it_resolves_changes_nothing(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reload awaits the new boards' name lookups after the frozen check: a handover that began
    meanwhile (its successor read the saved state) must find the reload refused, not applied here."""
    import yaml

    token = tmp_path / "admin-token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    admin = {"token_file": str(token)}
    path = tmp_path / "scheduler.yml"
    boards = [{"name": "b1", "address": "127.0.0.1:1"}]
    path.write_text(yaml.safe_dump({"boards": boards, "admin": admin}))
    sched = Scheduler(SchedulerConfig(boards=[BoardConfig(**boards[0])], admin=admin), str(path))
    try:
        path.write_text(
            yaml.safe_dump({"boards": [*boards, {"name": "b2", "address": "127.0.0.1:2"}], "admin": admin})
        )
        resolve = membership.check_addresses

        async def overtaken(added):
            sched.handing_over = lambda: True
            return await resolve(added)

        monkeypatch.setattr(membership, "check_addresses", overtaken)
        context = _Context(TOKEN)
        with pytest.raises(_Aborted):
            await sched.ReloadBoards(pb.ReloadBoardsRequest(), context)  # type: ignore[arg-type]
        assert context.aborted == (grpc.StatusCode.UNAVAILABLE, f"ReloadBoards: {contract.HANDING_OVER}")
        assert list(sched.by_name) == ["b1"]
        # Retried once the handover failed (thawed): the same reload is taken.
        sched.handing_over = lambda: False
        monkeypatch.setattr(membership, "check_addresses", resolve)
        reply = await sched.ReloadBoards(pb.ReloadBoardsRequest(), _Context(TOKEN))  # type: ignore[arg-type]
        assert list(reply.added) == ["b2"] and list(sched.by_name) == ["b1", "b2"]
    finally:
        await sched.close()
