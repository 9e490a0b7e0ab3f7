"""The boards' health follows the scheduler's operator actions (drain, active set, temperature) and
their own hang detection, and comes back when the cause clears; GetRoute follows the rotation.

Real scheduler and sim agents on loopback; board2 reads its temperature from a fake sysfs tree.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from helpers.cli import run_npudure
from helpers.fleet_ops import wait_for

from npudure.proto import inference_pb2 as pb
from npudure.proto import inference_pb2_grpc as rpc
from npudure.security import access as security
from npudure_workshop.lab.local import LocalCluster

INFERENCE = "npudure.v1.Inference"
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def _set_temp(root: Path, celsius: float) -> None:
    zone = root / "class" / "thermal" / "thermal_zone0"
    zone.mkdir(parents=True, exist_ok=True)
    (zone / "type").write_text("soc-thermal\n")
    (zone / "temp").write_text(f"{int(celsius * 1000)}\n")


@pytest.fixture(scope="module")
def fake_sysfs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sysfs")
    _set_temp(root, 40.0)
    return root


@pytest.fixture(scope="module")
def cluster(fake_sysfs: Path) -> Iterator[LocalCluster]:
    with LocalCluster(
        boards=2,
        time_scale=0.2,
        agent_overrides={"hang_timeout_s": 0.5},
        per_board_overrides={"board2": {"affinity": {"sysfs_root": str(fake_sysfs)}, "sim": {"seed": 2}}},
        scheduler_overrides={"health_interval_s": 0.2, "status_interval_s": 0.2, "thermal_limit_c": 80.0},
    ) as c:
        yield c


def health(address: str, service: str) -> int:
    with security.channel(address) as channel:
        return (
            health_pb2_grpc.HealthStub(channel)
            .Check(health_pb2.HealthCheckRequest(service=service), timeout=2)
            .status
        )


def cluster_stub(cluster: LocalCluster) -> tuple[grpc.Channel, rpc.ClusterStub]:
    channel = security.channel(cluster.address)
    return channel, rpc.ClusterStub(channel)


def route_boards(stub: rpc.ClusterStub) -> list[str]:
    return [b.name for b in stub.GetRoute(pb.RouteRequest(), timeout=5).boards]


def node_reasons(cluster: LocalCluster, board: str) -> list[str]:
    with security.channel(cluster.agents[board].address) as channel:
        return list(rpc.NodeStub(channel).GetStatus(pb.NodeStatusRequest(), timeout=5).not_serving_reasons)


def test_drain_takes_the_board_out_for_proxyless_clients_and_back(cluster: LocalCluster) -> None:
    board1 = cluster.agents["board1"].address
    channel, stub = cluster_stub(cluster)
    with channel:
        assert health(board1, INFERENCE) == SERVING
        assert route_boards(stub) == ["board1", "board2"]
        stub.DrainNode(pb.DrainNodeRequest(node="board1", drain=True), timeout=5)
        wait_for("board1 NOT_SERVING after drain", lambda: health(board1, INFERENCE) == NOT_SERVING)
        assert node_reasons(cluster, "board1") == ["drained"]
        shown = run_npudure("status", "--target", board1)
        assert shown.returncode == 0 and "NOT serving (drained)" in shown.stdout, shown.stdout
        assert route_boards(stub) == ["board2"]
        # The board's own health stays SERVING: the scheduler still sees a drained board, not a dead one.
        time.sleep(0.6)
        assert health(board1, "") == SERVING
        states = {b.name: b.state for b in stub.GetClusterStatus(pb.ClusterStatusRequest(), timeout=5).boards}
        assert states["board1"] == pb.BOARD_STATE_DRAINING
        stub.DrainNode(pb.DrainNodeRequest(node="board1", drain=False), timeout=5)
        wait_for("board1 SERVING after undrain", lambda: health(board1, INFERENCE) == SERVING)
        assert route_boards(stub) == ["board1", "board2"]


def test_active_set_reaches_the_boards(cluster: LocalCluster) -> None:
    board1 = cluster.agents["board1"].address
    channel, stub = cluster_stub(cluster)
    with channel:
        stub.SetActiveNodes(pb.SetActiveNodesRequest(nodes=["board2"]), timeout=5)
        wait_for("board1 NOT_SERVING when inactive", lambda: health(board1, INFERENCE) == NOT_SERVING)
        assert node_reasons(cluster, "board1") == ["inactive"]
        stub.SetActiveNodes(pb.SetActiveNodesRequest(nodes=["board1", "board2"]), timeout=5)
        wait_for("board1 SERVING when active again", lambda: health(board1, INFERENCE) == SERVING)


def test_a_hot_board_stops_serving_and_comes_back_when_cool(cluster: LocalCluster, fake_sysfs: Path) -> None:
    board2 = cluster.agents["board2"].address
    try:
        _set_temp(fake_sysfs, 90.0)
        wait_for("board2 NOT_SERVING when hot", lambda: health(board2, INFERENCE) == NOT_SERVING)
        assert node_reasons(cluster, "board2") == ["hot"]
        _set_temp(fake_sysfs, 60.0)  # under the limit minus the 5 C hysteresis
        wait_for("board2 SERVING when cool", lambda: health(board2, INFERENCE) == SERVING)
    finally:
        _set_temp(fake_sysfs, 40.0)


def test_a_hung_npu_turns_both_health_services_off_until_it_returns(cluster: LocalCluster) -> None:
    board2 = cluster.agents["board2"].address
    frame = np.zeros((640, 640, 3), np.uint8).tobytes()
    with security.channel(board2) as channel:
        node = rpc.NodeStub(channel)
        node.InjectFault(pb.InjectFaultRequest(fault=pb.FAULT_HANG), timeout=5)
        stuck = threading.Thread(
            target=lambda: rpc.InferenceStub(channel).Infer(
                pb.InferRequest(encoding=pb.ENCODING_RAW_RGB, frame=frame), timeout=30
            ),
            daemon=True,
        )
        try:
            stuck.start()
            wait_for("board2 NOT_SERVING while hung", lambda: health(board2, INFERENCE) == NOT_SERVING)
            assert health(board2, "") == NOT_SERVING
            assert "hung" in node_reasons(cluster, "board2")
        finally:
            node.InjectFault(pb.InjectFaultRequest(fault=pb.FAULT_NONE), timeout=5)
        stuck.join(30)
        wait_for("board2 SERVING after the hang", lambda: health(board2, INFERENCE) == SERVING)
        assert health(board2, "") == SERVING


def test_set_serving_is_an_admin_call(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("x" * 32)
    token.chmod(0o600)
    with LocalCluster(boards=1, time_scale=0.2, agent_overrides={"admin": {"token_file": str(token)}}) as c:
        # The scheduler has no token here: its push is refused, and so is ours.
        with (
            security.channel(c.agents["board1"].address) as channel,
            pytest.raises(grpc.RpcError) as caught,
        ):
            rpc.NodeStub(channel).SetServing(pb.SetServingRequest(reasons=["drained"]), timeout=5)
        assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert health(c.agents["board1"].address, INFERENCE) == SERVING
