"""Secure by default, on real processes over loopback: admin RPCs need credentials, mutual TLS is
enforced by the SERVER, and a second server cannot share a port."""

from __future__ import annotations

import os

import grpc
import pytest
import yaml
from helpers.cli import run_npudure
from helpers.loadgen import frame_bytes
from helpers.mtls_cluster import mtls_cluster

from npudure.proto import inference_pb2 as pb
from npudure.proto import inference_pb2_grpc as rpc
from npudure.security import access as security
from npudure.security import pki
from npudure_workshop.lab.local import LocalCluster

SCHEDULER_ADMIN = [
    ("SetPolicy", pb.SetPolicyRequest(policy="round_robin")),
    ("SetActiveNodes", pb.SetActiveNodesRequest(nodes=["board1"])),
    ("DrainNode", pb.DrainNodeRequest(node="board1", drain=True)),
    ("SetNodeCpuCap", pb.SetNodeCpuCapRequest(node="board1", mhz=816)),
    ("AcquireLease", pb.LeaseRequest(holder="intruder", ttl_s=5)),
    ("ReleaseLease", pb.LeaseRequest(holder="intruder")),
    ("ReloadBoards", pb.ReloadBoardsRequest()),
]
AGENT_ADMIN = [
    ("SetCpuCap", pb.SetCpuCapRequest(mhz=816)),
    ("InjectFault", pb.InjectFaultRequest(fault=pb.FAULT_HANG)),
]


def refused(channel: grpc.Channel, service: str, calls) -> None:
    stub = rpc.ClusterStub(channel) if service == "Cluster" else rpc.NodeStub(channel)
    for name, request in calls:
        with pytest.raises(grpc.RpcError) as err:
            getattr(stub, name)(request, timeout=5)
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED, (name, err.value.code())
        assert "admin call" in err.value.details()


def test_a_server_without_credentials_configured_refuses_every_admin_call() -> None:
    # An explicit empty admin section: no token, no TLS, no opt-out — the default deployment's worst case.
    with LocalCluster(
        boards=1, time_scale=5.0, agent_overrides={"admin": {}}, scheduler_overrides={"admin": {}}
    ) as cl:
        with grpc.insecure_channel(cl.address) as channel:
            refused(channel, "Cluster", SCHEDULER_ADMIN)
            status = rpc.ClusterStub(channel).GetClusterStatus(pb.ClusterStatusRequest(), timeout=5)
            assert status.policy == "least_inflight" and status.lease_holder == ""
        with grpc.insecure_channel(cl.agents["board1"].address) as channel:
            refused(channel, "Node", AGENT_ADMIN)
        assert "refused admin call SetPolicy from ipv4:127.0.0.1" in cl.logs("scheduler")
        assert "refused admin call InjectFault from ipv4:127.0.0.1" in cl.logs("board1")


def test_the_default_local_cluster_needs_its_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(security.ENV_TOKEN, raising=False)
    with LocalCluster(boards=1, time_scale=5.0) as cl:
        assert cl.admin_token_file is not None and cl.admin_token_file.stat().st_mode & 0o077 == 0
        for address, service, calls in (
            (cl.address, "Cluster", SCHEDULER_ADMIN[:1]),
            (cl.agents["board1"].address, "Node", AGENT_ADMIN[:1]),
        ):
            with grpc.insecure_channel(address) as channel:
                refused(channel, service, calls)
        # The cluster's own clients carry the token: accepted, and the scheduler's cap reaches the board.
        with security.channel(cl.address) as channel:
            admin = rpc.ClusterStub(channel)
            assert (
                admin.SetPolicy(pb.SetPolicyRequest(policy="round_robin"), timeout=5).policy == "round_robin"
            )
            capped = admin.SetNodeCpuCap(pb.SetNodeCpuCapRequest(node="board1", mhz=816), timeout=5)
            assert capped.cpu_cap_mhz == 816
    assert security.ENV_TOKEN not in os.environ


def test_insecure_open_is_an_explicit_opt_out() -> None:
    with LocalCluster(boards=1, time_scale=5.0, scheduler_overrides={"admin": {"insecure_open": True}}) as cl:
        with grpc.insecure_channel(cl.address) as channel:
            reply = rpc.ClusterStub(channel).SetPolicy(pb.SetPolicyRequest(policy="round_robin"), timeout=5)
        assert reply.policy == "round_robin"
        assert "admin RPCs are open to anyone" in cl.logs("scheduler")


# ---------------------------------------------------------------------- one server per port
def test_a_second_server_on_a_used_port_is_refused(tmp_path) -> None:
    with LocalCluster(boards=1, time_scale=5.0) as cl:
        agent = yaml.safe_load(cl.agents["board1"].config_path.read_text())
        sched = yaml.safe_load(cl.scheduler.config_path.read_text())
        (tmp_path / "agent.yml").write_text(yaml.safe_dump({**agent, "node_name": "twin"}))
        (tmp_path / "scheduler.yml").write_text(yaml.safe_dump({**sched, "startup_wait_s": 1}))
        for kind in ("agent", "scheduler"):
            proc = run_npudure(kind, "--config", str(tmp_path / f"{kind}.yml"))
            assert proc.returncode == 1, (kind, proc.stderr)
            lines = proc.stderr.strip().splitlines()
            error = [line for line in lines if line.startswith(f"npudure {kind}:")]
            assert error and "already in use" in error[0], proc.stderr
            assert "Traceback" not in proc.stderr
        # The first servers still serve: the twin did not take half of the port.
        with security.channel(cl.address) as channel:
            status = rpc.ClusterStub(channel).GetClusterStatus(pb.ClusterStatusRequest(), timeout=5)
        assert [b.state for b in status.boards] == [pb.BOARD_STATE_UP]


# ---------------------------------------------------------------------- mutual TLS: the server refuses
@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> dict[str, pki.Issued]:
    root = tmp_path_factory.mktemp("pki")
    pki.make_ca(root / "ca")
    pki.make_ca(root / "other", cn="Someone else's CA")
    return {
        "agent": pki.issue(root / "ca", "board", ["127.0.0.1"], root / "agent"),
        "scheduler": pki.issue(root / "ca", "npudure-scheduler", ["127.0.0.1"], root / "scheduler"),
        "viewer": pki.issue(root / "ca", "viewer", [], root / "viewer", usage="client"),
        "stranger": pki.issue(root / "other", "npudure-admin", [], root / "stranger", usage="client"),
    }


@pytest.fixture(scope="module")
def tls_cluster(certs):
    # Module-scoped and last in the file: its client TLS environment stays set until the module ends.
    with mtls_cluster(certs, certs["viewer"], boards=1) as cl:
        yield cl


def fleet_trusting_credentials(certs, presented: str | None) -> grpc.ChannelCredentials:
    """Trusts the fleet CA (so the CLIENT accepts the server); presents ``presented``'s cert, or none."""
    ca = certs["agent"].ca.read_bytes()
    if presented is None:
        return grpc.ssl_channel_credentials(root_certificates=ca)
    issued = certs[presented]
    return grpc.ssl_channel_credentials(ca, issued.key.read_bytes(), issued.cert.read_bytes())


@pytest.mark.parametrize("target", ["scheduler", "agent"])
@pytest.mark.parametrize("presented", [None, "stranger", "viewer"])
def test_the_server_enforces_client_certificates(tls_cluster, certs, target, presented) -> None:
    address = tls_cluster.address if target == "scheduler" else tls_cluster.agents["board1"].address
    request = pb.InferRequest(encoding=pb.ENCODING_RAW_RGB, frame=frame_bytes())
    credentials = fleet_trusting_credentials(certs, presented)
    with grpc.secure_channel(address, credentials, options=[("grpc.max_send_message_length", 8 << 20)]) as ch:
        call = rpc.InferenceStub(ch).Infer
        if presented == "viewer":  # the control: the same client with a fleet certificate is served
            assert call(request, timeout=10).node == "board1"
            return
        with pytest.raises(grpc.RpcError) as err:
            call(request, timeout=5)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
