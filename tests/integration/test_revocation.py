"""A revoked client certificate on real processes (loopback, mutual TLS): served before, refused
UNAUTHENTICATED by the scheduler once ``npudure pki revoke`` has listed it and the scheduler has been
reloaded (no restart), and by an agent once it has started with the CRL; a certificate not listed is
served throughout, and the scheduler keeps reaching its boards. Central and proxyless load under a
certificate that stays valid runs across the revocation, the reload and the agent's restart: no
request fails and no stretch of the gap limit (0.5 s in the boards' time) passes without a reply.

The services' CRL is the default one, ``crl.pem`` beside their ``tls.ca``: here the CA folder itself,
where ``revoke`` writes it (on a fleet the npudure_tls role copies it beside /etc/npudure/tls/ca.crt).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import grpc
import pytest
from helpers.cli import agent_config, run_npudure, run_service
from helpers.fleet_ops import FRAME, board_states, failures, reload, wait_for
from helpers.mtls_cluster import as_client, tls_section

from npudure.proto import inference_pb2 as pb
from npudure.proto import inference_pb2_grpc as rpc
from npudure.security import access as security
from npudure.security import crl, pki
from npudure_workshop.faults.background import BackgroundLoad
from npudure_workshop.faults.operations import gap_limit_s
from npudure_workshop.lab.local import LocalCluster


@pytest.fixture
def certs(tmp_path: Path) -> dict[str, pki.Issued]:
    ca = tmp_path / "ca"
    pki.make_ca(ca)
    return {
        # The fleet name as the tls role adds it: proxyless clients check the boards against it.
        "agent": pki.issue(ca, "board", ["127.0.0.1", security.AGENT_FLEET_NAME], tmp_path / "agent"),
        "scheduler": pki.issue(ca, "npudure-scheduler", ["127.0.0.1"], tmp_path / "scheduler"),
        "admin": pki.issue(ca, "npudure-admin", [], tmp_path / "admin", usage="client-only"),
        "leaving": pki.issue(ca, "board3", [], tmp_path / "leaving", usage="client-only"),
        "staying": pki.issue(ca, "viewer", [], tmp_path / "staying", usage="client-only"),
    }


def _status(address: str, scheduler: bool) -> grpc.StatusCode | None:
    """None when the call is served, else its status code (and the details checked when refused)."""
    with security.channel(address) as channel:
        try:
            if scheduler:
                rpc.ClusterStub(channel).GetClusterStatus(pb.ClusterStatusRequest(), timeout=5)
            else:
                rpc.NodeStub(channel).GetStatus(pb.NodeStatusRequest(), timeout=5)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.UNAUTHENTICATED:
                assert "is revoked" in (exc.details() or ""), exc.details()
            return exc.code()
    return None


def test_a_revoked_client_is_refused_after_a_reload_and_by_a_restarted_agent(
    certs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ca_dir = certs["admin"].ca.parent
    # As on the appliance: the admin token beside TLS, so the reload command (which presents the
    # scheduler's own certificate) is an admin call.
    admin = {"token_file": str(security.write_token(tmp_path / "admin-token"))}
    monkeypatch.setenv(security.ENV_TOKEN, admin["token_file"])
    as_client(monkeypatch, certs["admin"])
    with LocalCluster(
        boards=2,
        time_scale=5.0,
        agent_overrides={
            "tls": tls_section(certs["agent"]),
            "admin": {**admin, "identities": ["npudure-scheduler"]},
        },
        scheduler_overrides={"tls": tls_section(certs["scheduler"]), "admin": admin},
    ) as cluster:
        board1 = cluster.agents["board1"].address
        for who in ("leaving", "staying"):
            as_client(monkeypatch, certs[who])
            assert _status(cluster.address, scheduler=True) is None
            assert _status(board1, scheduler=False) is None

        # Load in both modes under a certificate that stays valid, across the revocation, the reload and
        # the agent's restart: none of it may cost a request or a stretch of the gap limit without a reply.
        as_client(monkeypatch, certs["staying"])
        stop = threading.Event()
        loads = [
            BackgroundLoad(cluster.address, [FRAME], 3, 0.5, 300, time.perf_counter(), mode=mode, stop=stop)
            for mode in ("scheduler", "proxyless")
        ]
        for load in loads:
            load.start()
        time.sleep(2.0)
        try:
            _revoke_reload_restart(cluster, certs, ca_dir, monkeypatch)
        finally:
            stop.set()
        for load in loads:
            failed, total, errors, gap = failures(load)
            print(
                f"revoke + reload + agent restart under {load.mode} load: {failed}/{total} failed, "
                f"gap {gap:.2f}s"
            )
            assert failed == 0 and total > 0, (load.mode, failed, total, errors)
            assert gap < gap_limit_s(5.0), (load.mode, gap)  # the cluster's time scale


def _revoke_reload_restart(
    cluster: LocalCluster, certs: dict[str, pki.Issued], ca_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``leaving`` revoked: served until the scheduler's reload, then refused by it; refused by board1
    once it has restarted (it reads the CRL at start); ``staying`` served throughout."""
    board1 = cluster.agents["board1"].address
    revoked = run_npudure("pki", "revoke", "--ca-dir", str(ca_dir), "--cert", str(certs["leaving"].cert))
    assert revoked.returncode == 0, revoked.stderr
    as_client(monkeypatch, certs["leaving"])
    assert _status(cluster.address, scheduler=True) is None  # the running list, until the reload

    as_client(monkeypatch, certs["admin"])
    done = reload(cluster)
    assert done.returncode == 0, done.stderr
    assert "1 certificate(s) revoked" in done.stdout
    as_client(monkeypatch, certs["leaving"])
    assert _status(cluster.address, scheduler=True) == grpc.StatusCode.UNAUTHENTICATED
    assert _status(board1, scheduler=False) is None  # the agent read its CRL at start
    as_client(monkeypatch, certs["staying"])
    assert _status(cluster.address, scheduler=True) is None

    as_client(monkeypatch, certs["admin"])
    cluster.restart_agent("board1")  # a board's drained restart: it reads the CRL again
    as_client(monkeypatch, certs["leaving"])
    assert _status(board1, scheduler=False) == grpc.StatusCode.UNAUTHENTICATED
    as_client(monkeypatch, certs["staying"])
    assert _status(board1, scheduler=False) is None
    as_client(monkeypatch, certs["admin"])
    wait_for("both boards UP", lambda: set(board_states(cluster).values()) == {"UP"})
    assert "is revoked" in cluster.logs("scheduler")


def test_an_agent_refuses_to_start_with_a_crl_of_another_ca(certs, tmp_path: Path) -> None:
    other = tmp_path / "other-ca"
    pki.make_ca(other)
    stranger = pki.issue(other, "x", [], tmp_path / "stranger", usage="client-only")
    crl.revoke(other, cert=stranger.cert)
    agent = certs["agent"]
    proc = run_service(
        tmp_path,
        "agent",
        agent_config(
            f"tls:\n  ca: {agent.ca}\n  cert: {agent.cert}\n  key: {agent.key}\n"
            f"  crl: {other / crl.CRL_NAME}\n"
        ),
    )
    assert proc.returncode == 78, proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("npudure agent: the CRL")
    assert "is not signed by the CA" in proc.stderr and "Traceback" not in proc.stderr
