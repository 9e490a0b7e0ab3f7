"""Integration: a real scheduler and real `sim` agents as processes, real gRPC on loopback."""

from __future__ import annotations

from collections import Counter

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from helpers.cli import run_npudure, run_service
from helpers.loadgen import frame_bytes

from npudure.proto import inference_pb2 as pb
from npudure.proto import inference_pb2_grpc as rpc
from npudure.security import access as security
from npudure.vision import frames
from npudure_workshop.lab.local import LocalCluster, free_port

# Slow the emulated boards 10x (16 inf/s each) so this 2-core machine is never the bottleneck.
TIME_SCALE = 10.0


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(boards=3, time_scale=TIME_SCALE, policy="round_robin") as c:
        yield c


def stub(address: str) -> rpc.InferenceStub:
    channel = security.channel(address, options=[("grpc.max_send_message_length", 16 << 20)])
    return rpc.InferenceStub(channel)


def set_policy(address: str, policy: str) -> None:
    with security.channel(address) as channel:
        rpc.ClusterStub(channel).SetPolicy(pb.SetPolicyRequest(policy=policy), timeout=5)


def test_round_robin_spreads_evenly(cluster: LocalCluster) -> None:
    set_policy(cluster.address, "round_robin")
    infer = stub(cluster.address)
    request = pb.InferRequest(encoding=pb.ENCODING_RAW_RGB, frame=frame_bytes())
    served = Counter(infer.Infer(request, timeout=10).node for _ in range(30))
    assert served == Counter({"board1": 10, "board2": 10, "board3": 10})


def test_response_carries_stage_timing_and_emulated_flag(cluster: LocalCluster) -> None:
    reply = stub(cluster.address).Infer(
        pb.InferRequest(request_id="t-1", encoding=pb.ENCODING_RAW_RGB, frame=frame_bytes()), timeout=10
    )
    t = reply.timing
    assert reply.request_id == "t-1"
    assert reply.emulated and reply.backend == "sim"
    assert reply.attempts == 1
    # The sim's service time (12.38 ms x time scale) shows up as inference time on the board.
    assert t.inference_us >= 0.9 * 12_380 * TIME_SCALE
    assert t.board_total_us >= t.inference_us
    assert t.scheduler_total_us >= t.board_total_us + t.network_to_board_us


@pytest.mark.parametrize(
    ("encoding", "frame", "code", "fragment"),
    [
        (pb.ENCODING_RAW_RGB, b"\0" * 1000, grpc.StatusCode.INVALID_ARGUMENT, "1228800"),
        (
            pb.ENCODING_JPEG,
            b"\xff\xd8\xff\xe0 not really a jpeg",
            grpc.StatusCode.INVALID_ARGUMENT,
            "not a valid JPEG",
        ),
        (pb.ENCODING_RAW_RGB, b"", grpc.StatusCode.INVALID_ARGUMENT, "has 0 bytes"),
        (pb.ENCODING_UNSPECIFIED, b"\0" * 1228800, grpc.StatusCode.INVALID_ARGUMENT, "ENCODING_UNSPECIFIED"),
        (pb.ENCODING_RAW_RGB, b"\0" * (5 << 20), grpc.StatusCode.RESOURCE_EXHAUSTED, ""),
    ],
)
@pytest.mark.parametrize("via", ["scheduler", "agent"])
def test_bad_input_gets_its_status_and_server_keeps_serving(
    cluster: LocalCluster, via: str, encoding: int, frame: bytes, code: grpc.StatusCode, fragment: str
) -> None:
    address = cluster.address if via == "scheduler" else cluster.agents["board1"].address
    infer = stub(address)
    with pytest.raises(grpc.RpcError) as err:
        infer.Infer(pb.InferRequest(encoding=encoding, frame=frame), timeout=10)
    assert err.value.code() == code
    assert fragment in (err.value.details() or "")
    ok = infer.Infer(pb.InferRequest(encoding=pb.ENCODING_RAW_RGB, frame=frame_bytes()), timeout=10)
    assert ok.node.startswith("board")


def test_bad_input_does_not_mark_boards_down(cluster: LocalCluster) -> None:
    infer = stub(cluster.address)
    for _ in range(5):
        with pytest.raises(grpc.RpcError):
            infer.Infer(pb.InferRequest(encoding=pb.ENCODING_RAW_RGB, frame=b"x"), timeout=10)
    with security.channel(cluster.address) as channel:
        status = rpc.ClusterStub(channel).GetClusterStatus(pb.ClusterStatusRequest(), timeout=5)
    assert all(b.state == pb.BOARD_STATE_UP for b in status.boards)


def test_jpeg_frames_are_served(cluster: LocalCluster) -> None:
    jpeg = frames.encode_jpeg(np.full((640, 640, 3), 120, np.uint8))
    reply = stub(cluster.address).Infer(pb.InferRequest(encoding=pb.ENCODING_JPEG, frame=jpeg), timeout=10)
    assert reply.timing.decode_us > 0


@pytest.mark.parametrize("which", ["scheduler", "agent"])
def test_health_and_reflection_for_generic_tools(cluster: LocalCluster, which: str) -> None:
    address = cluster.address if which == "scheduler" else cluster.agents["board2"].address
    with security.channel(address) as channel:
        health = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=""), timeout=5
        )
        assert health.status == health_pb2.HealthCheckResponse.SERVING
        replies = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5
        )
        services = {s.name for r in replies for s in r.list_services_response.service}
    assert "npudure.v1.Inference" in services
    assert "grpc.health.v1.Health" in services
    assert ("npudure.v1.Cluster" if which == "scheduler" else "npudure.v1.Node") in services


def test_admin_rpcs_validate_their_input(cluster: LocalCluster) -> None:
    with security.channel(cluster.address) as channel:
        admin = rpc.ClusterStub(channel)
        with pytest.raises(grpc.RpcError) as err:
            admin.SetActiveNodes(pb.SetActiveNodesRequest(nodes=["board9"]), timeout=5)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "board9" in err.value.details()
        with pytest.raises(grpc.RpcError) as err:
            admin.SetPolicy(pb.SetPolicyRequest(policy="fastest"), timeout=5)
        assert "least_inflight" in err.value.details()
        first = admin.AcquireLease(pb.LeaseRequest(holder="bench A", ttl_s=30), timeout=5)
        assert first.holder == "bench A"
        with pytest.raises(grpc.RpcError) as err:
            admin.AcquireLease(pb.LeaseRequest(holder="bench B", ttl_s=30), timeout=5)
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "bench A" in err.value.details()
        admin.ReleaseLease(pb.LeaseRequest(holder="bench A"), timeout=5)
        assert admin.AcquireLease(pb.LeaseRequest(holder="bench B", ttl_s=1), timeout=5).holder == "bench B"
        admin.ReleaseLease(pb.LeaseRequest(holder="bench B"), timeout=5)


def test_active_set_and_drain_steer_traffic(cluster: LocalCluster) -> None:
    set_policy(cluster.address, "least_inflight")
    request = pb.InferRequest(encoding=pb.ENCODING_RAW_RGB, frame=frame_bytes())
    with security.channel(cluster.address) as channel:
        admin = rpc.ClusterStub(channel)
        try:
            admin.SetActiveNodes(pb.SetActiveNodesRequest(nodes=["board1", "board3"]), timeout=5)
            admin.DrainNode(pb.DrainNodeRequest(node="board3", drain=True), timeout=5)
            served = Counter(stub(cluster.address).Infer(request, timeout=10).node for _ in range(6))
            assert served == Counter({"board1": 6})
        finally:
            admin.DrainNode(pb.DrainNodeRequest(node="board3", drain=False), timeout=5)
            admin.SetActiveNodes(pb.SetActiveNodesRequest(nodes=["board1", "board2", "board3"]), timeout=5)


def test_scheduler_refuses_to_start_when_no_board_answers(tmp_path) -> None:
    proc = run_service(
        tmp_path,
        "scheduler",
        f"listen: 127.0.0.1:{free_port()}\nmetrics_port: 0\nstartup_wait_s: 1\n"
        f"boards:\n  - name: ghost\n    address: 127.0.0.1:{free_port()}\n",
    )
    assert proc.returncode == 1
    assert "ghost=127.0.0.1" in proc.stderr and "start the agents first" in proc.stderr


def test_agent_refuses_unknown_backend_and_missing_model(tmp_path) -> None:
    bad = tmp_path / "agent.yml"
    bad.write_text("node_name: b1\nbackend: npu\n")
    proc = run_npudure("agent", "--config", str(bad))
    assert proc.returncode == 78 and "'npu' is not allowed" in proc.stderr and "rknn" in proc.stderr
    missing = tmp_path / "agent2.yml"
    missing.write_text(f"node_name: b1\nbackend: onnx\nmodel: {tmp_path / 'nope.onnx'}\n")
    proc = run_npudure("agent", "--config", str(missing), "--check")
    assert proc.returncode == 78 and "nope.onnx does not exist" in proc.stderr
