"""The harness's admin view of a cluster: status, active set, policy, CPU caps — and putting them back.

Everything the harness changes on the scheduler goes through ``ClusterGuard``, which remembers the
original value the first time a setting is touched and restores it in ``restore()`` — called from a
``finally`` so that Ctrl-C, SIGTERM or a crash mid-ladder never leaves a board capped at 600 MHz.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

import grpc

from npudure.client.handover_retry import BUDGET_S, retrying
from npudure.proto import contract
from npudure.proto import inference_pb2 as pb
from npudure.proto import inference_pb2_grpc as rpc
from npudure.security import access as security

log = logging.getLogger(__name__)

ADMIN_TIMEOUT_S = 5.0
R = TypeVar("R")


class BenchError(Exception):
    """Something stops the benchmark; the message says what and how to fix it."""


def state_name(state: int) -> str:
    try:
        return pb.BoardState.Name(state).removeprefix("BOARD_STATE_")
    except ValueError:
        return str(state)


def explain(address: str, what: str, exc: grpc.RpcError) -> BenchError:
    code = exc.code() if hasattr(exc, "code") else None
    details = exc.details() if hasattr(exc, "details") else str(exc)
    if code == grpc.StatusCode.UNAVAILABLE and contract.HANDING_OVER in (details or ""):
        return BenchError(
            f"the scheduler at {address} was still handing over to a new process when {what} gave up "
            "retrying; run the benchmark again once `npudure admin status` answers"
        )
    if code == grpc.StatusCode.UNAVAILABLE:
        return BenchError(
            f"cannot reach the scheduler at {address} ({what}): {details}. Is it running, and is "
            "--target the host:port of the scheduler (not an agent)?"
        )
    if code == grpc.StatusCode.UNIMPLEMENTED:
        return BenchError(
            f"{address} does not implement {what}: --target must be an npudure scheduler "
            "(agents have no Cluster service)"
        )
    return BenchError(f"{what} on {address} failed: {code.name if code else 'error'}: {details}")


class ClusterAdmin:
    """Synchronous Cluster stub on the scheduler plus Node stubs straight to each board (telemetry)."""

    def __init__(
        self,
        address: str,
        retry_budget_s: float = BUDGET_S,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.address = address
        self._channel = security.channel(address)
        self.cluster = rpc.ClusterStub(self._channel)
        self._nodes: dict[str, tuple[grpc.Channel, rpc.NodeStub]] = {}
        self._retry_budget_s, self._sleep, self._clock = retry_budget_s, sleep, clock

    def _changing(self, call: Callable[[], R]) -> R:
        # A scheduler handing over (or restarting) refuses state changes with UNAVAILABLE for a few
        # seconds; a change asked of it is repeated, bounded, like `npudure admin drain`.
        return retrying(call, budget_s=self._retry_budget_s, clock=self._clock, sleep=self._sleep)

    def close(self) -> None:
        for channel, _ in self._nodes.values():
            channel.close()
        self._nodes.clear()
        self._channel.close()

    def status(self, timeout_s: float = ADMIN_TIMEOUT_S) -> pb.ClusterStatus:
        try:
            return self.cluster.GetClusterStatus(pb.ClusterStatusRequest(), timeout=timeout_s)
        except grpc.RpcError as exc:
            raise explain(self.address, "GetClusterStatus", exc) from None

    def set_active(self, names: list[str]) -> pb.ClusterStatus:
        try:
            return self._changing(
                lambda: self.cluster.SetActiveNodes(
                    pb.SetActiveNodesRequest(nodes=names), timeout=ADMIN_TIMEOUT_S
                )
            )
        except grpc.RpcError as exc:
            raise explain(self.address, f"SetActiveNodes({', '.join(names)})", exc) from None

    def set_policy(self, policy: str) -> pb.ClusterStatus:
        try:
            return self._changing(
                lambda: self.cluster.SetPolicy(pb.SetPolicyRequest(policy=policy), timeout=ADMIN_TIMEOUT_S)
            )
        except grpc.RpcError as exc:
            raise explain(self.address, f"SetPolicy({policy})", exc) from None

    def set_cap(self, node: str, mhz: int) -> pb.NodeStatus:
        try:
            return self._changing(
                lambda: self.cluster.SetNodeCpuCap(
                    pb.SetNodeCpuCapRequest(node=node, mhz=mhz), timeout=ADMIN_TIMEOUT_S
                )
            )
        except grpc.RpcError as exc:
            raise explain(self.address, f"SetNodeCpuCap({node}, {mhz} MHz)", exc) from None

    def node_stub(self, address: str) -> rpc.NodeStub:
        if address not in self._nodes:
            channel = security.channel(address)
            self._nodes[address] = (channel, rpc.NodeStub(channel))
        return self._nodes[address][1]

    def node_status(self, address: str, timeout_s: float = 1.0) -> pb.NodeStatus | None:
        """The board's own status, straight from its agent; None when it does not answer."""
        try:
            return self.node_stub(address).GetStatus(pb.NodeStatusRequest(), timeout=timeout_s)
        except grpc.RpcError:
            return None


def active_boards(status: pb.ClusterStatus) -> list[str]:
    """Boards in the scheduler's active set, in the scheduler's board order."""
    return [b.name for b in status.boards if b.state != pb.BOARD_STATE_INACTIVE]


class ClusterGuard:
    """Changes settings through the admin and restores every original value on ``restore()``."""

    def __init__(self, admin: ClusterAdmin) -> None:
        self.admin = admin
        status = admin.status()
        self.original_policy = status.policy
        self.original_active = active_boards(status)
        self._board_addresses = {b.name: b.address for b in status.boards}
        self._cap_status = {b.name: b.last_status for b in status.boards if b.HasField("last_status")}
        self.original_caps: dict[str, int] = {}
        self._policy_changed = False
        self._active_changed = False

    def set_active(self, names: list[str]) -> pb.ClusterStatus:
        self._active_changed = True
        return self.admin.set_active(names)

    def set_policy(self, policy: str) -> pb.ClusterStatus:
        self._policy_changed = True
        return self.admin.set_policy(policy)

    def set_cap(self, node: str, mhz: int) -> pb.NodeStatus:
        if node not in self.original_caps:
            self.original_caps[node] = self._current_cap(node)
        return self.admin.set_cap(node, mhz)

    def _current_cap(self, node: str) -> int:
        address = self._board_addresses.get(node)
        fresh = self.admin.node_status(address) if address else None
        if fresh is not None:
            return fresh.cpu_cap_mhz
        cached = self._cap_status.get(node)
        return cached.cpu_cap_mhz if cached is not None else 0

    def reset_caps(self) -> None:
        """Put the CPU caps changed so far back to their original values (still remembered for restore)."""
        for node, mhz in self.original_caps.items():
            self.admin.set_cap(node, mhz)

    def restore(self) -> list[str]:
        """Put back every setting changed; returns what could not be restored (and logs it)."""
        problems: list[str] = []
        for node, mhz in self.original_caps.items():
            try:
                self.admin.set_cap(node, mhz)
            except BenchError as exc:
                problems.append(f"CPU cap of {node} not restored to {mhz or 'none'} MHz: {exc}")
        self.original_caps.clear()
        if self._policy_changed:
            try:
                self.admin.set_policy(self.original_policy)
                self._policy_changed = False
            except BenchError as exc:
                problems.append(f"policy not restored to {self.original_policy}: {exc}")
        if self._active_changed and self.original_active:
            try:
                self.admin.set_active(self.original_active)
                self._active_changed = False
            except BenchError as exc:
                problems.append(f"active boards not restored to {', '.join(self.original_active)}: {exc}")
        for problem in problems:
            log.error("%s", problem)
        return problems
