"""The harness's admin changes are asked again while the scheduler hands over (fake stub, fake clock)."""

from __future__ import annotations

import grpc
import pytest
from helpers.fake_clock import FakeClock

from npudure.proto import contract
from npudure.proto import inference_pb2 as pb
from npudure_workshop.bench.cluster import BenchError, ClusterAdmin, ClusterGuard


class _Refusal(grpc.RpcError):
    def __init__(self, rpc_name: str) -> None:
        self._details = f"{rpc_name}: {contract.HANDING_OVER}"

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return self._details


class _HandingOver:
    """A Cluster stub that refuses each state change ``refusals`` times, then applies it."""

    def __init__(self, refusals: float) -> None:
        self.refusals = refusals
        self.calls: dict[str, int] = {}
        self.policy = "score"
        self.active = ["b1", "b2", "b3"]

    def _refuse(self, rpc_name: str) -> None:
        self.calls[rpc_name] = self.calls.get(rpc_name, 0) + 1
        if self.calls[rpc_name] <= self.refusals:
            raise _Refusal(rpc_name)

    def _status(self) -> pb.ClusterStatus:
        boards = [
            pb.BoardStatus(
                name=name,
                address=f"127.0.0.1:{5000 + i}",
                state=pb.BOARD_STATE_UP if name in self.active else pb.BOARD_STATE_INACTIVE,
            )
            for i, name in enumerate(["b1", "b2", "b3"])
        ]
        return pb.ClusterStatus(policy=self.policy, boards=boards)

    def GetClusterStatus(self, request: pb.ClusterStatusRequest, timeout: float) -> pb.ClusterStatus:
        return self._status()

    def SetActiveNodes(self, request: pb.SetActiveNodesRequest, timeout: float) -> pb.ClusterStatus:
        self._refuse("SetActiveNodes")
        self.active = list(request.nodes)
        return self._status()

    def SetPolicy(self, request: pb.SetPolicyRequest, timeout: float) -> pb.ClusterStatus:
        self._refuse("SetPolicy")
        self.policy = request.policy
        return self._status()


def _admin(stub: _HandingOver, clock: FakeClock) -> ClusterAdmin:
    admin = ClusterAdmin("127.0.0.1:1", retry_budget_s=5.0, sleep=clock.sleep, clock=clock)
    admin.cluster = stub  # type: ignore[assignment]
    return admin


def test_set_active_and_policy_are_asked_again_until_the_successor_takes_them() -> None:
    clock, stub = FakeClock(), _HandingOver(refusals=2)
    admin = _admin(stub, clock)
    try:
        assert [b.name for b in admin.set_active(["b1"]).boards if b.state == pb.BOARD_STATE_UP] == ["b1"]
        assert admin.set_policy("round-robin").policy == "round-robin"
    finally:
        admin.close()
    assert stub.calls == {"SetActiveNodes": 3, "SetPolicy": 3}
    assert clock.pauses == [0.1, 0.2, 0.1, 0.2]


def test_the_guard_restores_through_a_handover() -> None:
    clock, stub = FakeClock(), _HandingOver(refusals=0)
    admin = _admin(stub, clock)
    try:
        guard = ClusterGuard(admin)
        guard.set_active(["b2"])
        guard.set_policy("round-robin")
        stub.refusals, stub.calls = 2, {}
        assert guard.restore() == []
    finally:
        admin.close()
    assert stub.active == ["b1", "b2", "b3"] and stub.policy == "score"
    assert stub.calls == {"SetActiveNodes": 3, "SetPolicy": 3}


def test_a_handover_that_never_ends_is_a_clear_bounded_error() -> None:
    clock, stub = FakeClock(), _HandingOver(refusals=float("inf"))
    admin = _admin(stub, clock)
    try:
        with pytest.raises(BenchError, match="still handing over to a new process") as caught:
            admin.set_policy("round-robin")
    finally:
        admin.close()
    assert "SetPolicy(round-robin)" in str(caught.value)
    assert clock.now <= 5.0 and 1 < stub.calls["SetPolicy"] < 20
    assert "\n" not in str(caught.value)
