"""Mutual TLS and admin identity on a real scheduler + agents (loopback): who gets in, who may administer."""

from __future__ import annotations

import secrets
from pathlib import Path

import grpc
import pytest
from helpers.cli import agent_config, run_service
from helpers.loadgen import frame_bytes
from helpers.mtls_cluster import as_client, mtls_cluster

from npudure.proto import inference_pb2 as pb
from npudure.proto import inference_pb2_grpc as rpc
from npudure.security import access as security
from npudure.security import pki
from npudure_workshop.lab.local import LocalCluster

OPTIONS = [("grpc.max_send_message_length", 8 << 20)]


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> dict[str, pki.Issued]:
    root = tmp_path_factory.mktemp("pki")
    ca, other = root / "ca", root / "other-ca"
    pki.make_ca(ca)
    pki.make_ca(other, cn="Someone else's CA")
    return {
        "agent": pki.issue(ca, "board", ["127.0.0.1"], root / "agent"),
        "scheduler": pki.issue(ca, "npudure-scheduler", ["127.0.0.1"], root / "scheduler"),
        "admin": pki.issue(ca, "npudure-admin", [], root / "admin", usage="client"),
        "viewer": pki.issue(ca, "viewer", [], root / "viewer", usage="client"),
        "stranger": pki.issue(other, "npudure-admin", [], root / "stranger", usage="client"),
    }


@pytest.fixture(scope="module")
def tls_cluster(certs):
    with mtls_cluster(certs, certs["admin"], boards=2) as cluster:
        yield cluster


def infer_request() -> pb.InferRequest:
    return pb.InferRequest(encoding=pb.ENCODING_RAW_RGB, frame=frame_bytes())


def test_client_with_a_fleet_certificate_is_served(tls_cluster, certs, monkeypatch) -> None:
    as_client(monkeypatch, certs["viewer"])
    with security.channel(tls_cluster.address, OPTIONS) as channel:
        reply = rpc.InferenceStub(channel).Infer(infer_request(), timeout=10)
        status = rpc.ClusterStub(channel).GetClusterStatus(pb.ClusterStatusRequest(), timeout=5)
    assert reply.node in {"board1", "board2"}
    assert all(b.state == pb.BOARD_STATE_UP for b in status.boards)  # scheduler ↔ agents over mTLS


@pytest.mark.parametrize("who", ["no certificate", "certificate from another CA"])
@pytest.mark.parametrize("target", ["scheduler", "agent"])
def test_peers_without_a_valid_certificate_are_refused(tls_cluster, certs, monkeypatch, who, target) -> None:
    address = tls_cluster.address if target == "scheduler" else tls_cluster.agents["board1"].address
    as_client(monkeypatch, None if who == "no certificate" else certs["stranger"])
    with security.channel(address, OPTIONS) as channel, pytest.raises(grpc.RpcError) as err:
        rpc.InferenceStub(channel).Infer(infer_request(), timeout=5)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE


def test_admin_calls_need_the_admin_identity(tls_cluster, certs, monkeypatch) -> None:
    as_client(monkeypatch, certs["viewer"])
    with security.channel(tls_cluster.address) as channel:
        admin = rpc.ClusterStub(channel)
        for call, request in (
            (admin.SetPolicy, pb.SetPolicyRequest(policy="round_robin")),
            (admin.SetActiveNodes, pb.SetActiveNodesRequest(nodes=["board1"])),
            (admin.DrainNode, pb.DrainNodeRequest(node="board1", drain=True)),
            (admin.AcquireLease, pb.LeaseRequest(holder="viewer", ttl_s=5)),
            (admin.SetNodeCpuCap, pb.SetNodeCpuCapRequest(node="board1", mhz=816)),
        ):
            with pytest.raises(grpc.RpcError) as err:
                call(request, timeout=5)
            assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert "admin call" in err.value.details()
    with security.channel(tls_cluster.agents["board1"].address) as channel:
        with pytest.raises(grpc.RpcError) as err:
            rpc.NodeStub(channel).InjectFault(pb.InjectFaultRequest(fault=pb.FAULT_HANG), timeout=5)
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    as_client(monkeypatch, certs["admin"])
    with security.channel(tls_cluster.address) as channel:
        admin = rpc.ClusterStub(channel)
        assert admin.SetPolicy(pb.SetPolicyRequest(policy="round_robin"), timeout=5).policy == "round_robin"
        # The scheduler's own certificate is an admin identity of the agents: the cap reaches the board.
        assert (
            admin.SetNodeCpuCap(pb.SetNodeCpuCapRequest(node="board1", mhz=816), timeout=5).cpu_cap_mhz == 816
        )
        admin.SetNodeCpuCap(pb.SetNodeCpuCapRequest(node="board1", mhz=0), timeout=5)
        admin.SetPolicy(pb.SetPolicyRequest(policy="least_inflight"), timeout=5)


def test_admin_token_without_tls(tmp_path, monkeypatch) -> None:
    token = tmp_path / "admin.token"
    token.write_text(secrets.token_hex(24))
    token.chmod(0o600)
    as_client(monkeypatch, None)  # a plaintext cluster
    with LocalCluster(
        boards=1, time_scale=5.0, scheduler_overrides={"admin": {"token_file": str(token)}}
    ) as cl:
        monkeypatch.delenv(security.ENV_TOKEN, raising=False)
        with security.channel(cl.address) as channel:
            with pytest.raises(grpc.RpcError) as err:
                rpc.ClusterStub(channel).SetPolicy(pb.SetPolicyRequest(policy="p2c"), timeout=5)
            assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert "NPUDURE_ADMIN_TOKEN_FILE" in err.value.details()
            # Reading is open; inference is open.
            rpc.ClusterStub(channel).GetClusterStatus(pb.ClusterStatusRequest(), timeout=5)
        monkeypatch.setenv(security.ENV_TOKEN, str(token))
        with security.channel(cl.address) as channel:
            assert (
                rpc.ClusterStub(channel).SetPolicy(pb.SetPolicyRequest(policy="p2c"), timeout=5).policy
                == "p2c"
            )


def test_a_token_file_others_can_read_is_refused_at_start(tmp_path) -> None:
    token = tmp_path / "admin.token"
    token.write_text(secrets.token_hex(24))
    token.chmod(0o644)
    proc = run_service(
        tmp_path,
        "agent",
        agent_config(f"admin:\n  token_file: {token}\n"),
    )
    assert proc.returncode == 78
    assert f"chmod 600 {token}" in proc.stderr


def test_missing_certificate_file_is_a_clear_start_up_error(tmp_path: Path) -> None:
    proc = run_service(
        tmp_path,
        "agent",
        agent_config(f"tls:\n  ca: {tmp_path}/ca.crt\n  cert: {tmp_path}/b1.crt\n  key: {tmp_path}/b1.key\n"),
    )
    assert proc.returncode == 78
    assert "cannot read the" in proc.stderr and "b1" in proc.stderr
