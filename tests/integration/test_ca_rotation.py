"""A CA rotation on real processes over mutual TLS, in the order playbooks/rotate-ca.yml rolls it: under
central load, no request fails; in the window agents and scheduler accept peers from either CA in both
directions (scheduler -> board client certificates, clients -> scheduler and boards); after ``finish`` a
certificate from the old CA is refused.

Each phase is what the playbook does: ``npudure pki rotate-ca`` on the controller's CA folder (the real
code), then per host what the tls role does - the trust file (``trust.crt``, or ``ca.crt`` outside a
rotation) copied to the host, each certificate checked (``--issuer first`` in the switch) and re-issued
from the CA that issues now when the check fails (key kept) - boards one at a time, each restarted
(SIGTERM: the agent drains) once the scheduler has the previous one back, then the scheduler by a
handover (``npudure scheduler --handover``: the successor serves before the old process stops).
"""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import grpc
import pytest
from helpers.fleet_ops import FRAME, agent_served, board_states, failures, wait_for
from helpers.handover import handover_command, running, stop_pid
from helpers.mtls_cluster import as_client

from npudure import cli
from npudure.proto import inference_pb2 as pb
from npudure.proto import inference_pb2_grpc as rpc
from npudure.security import access as security
from npudure.security import ca_rotation, pki
from npudure.service import handover
from npudure_workshop.faults.background import BackgroundLoad
from npudure_workshop.lab.local import LocalCluster

BOARDS = ("board1", "board2")


class Host:
    """One host's TLS folder (``ca.crt``, ``<name>.crt``, ``<name>.key``), as the tls role keeps it."""

    def __init__(self, root: Path, name: str, cn: str, sans: list[str], usage: pki.Usage) -> None:
        self.dir = root / f"{cn}-tls"
        self.name, self.cn, self.sans, self.usage = name, cn, sans, usage

    @property
    def files(self) -> pki.Issued:
        d = self.dir
        return pki.Issued(
            d / f"{self.name}.key", d / f"{self.name}.crt", d / f"{self.name}.csr", d / "ca.crt"
        )

    def tls(self) -> dict[str, str]:
        f = self.files
        return {"ca": str(f.ca), "cert": str(f.cert), "key": str(f.key)}

    def converge(self, ca_dir: Path) -> bool:
        """The role's configure step; True when something changed (the role would notify a restart)."""
        phase = ca_rotation.current_phase(ca_dir)
        trust = ca_dir / ("trust.crt" if phase else pki.CA_CERT)
        signing = ca_dir / ca_rotation.NEXT if phase == "switch" else ca_dir
        f = self.files
        self.dir.mkdir(exist_ok=True)
        changed = not f.ca.exists() or f.ca.read_bytes() != trust.read_bytes()
        if changed:
            shutil.copyfile(trust, f.ca)
        # The role's own check (tasks/leaf.yml): the CLI, exit 1 when the certificate must be re-issued.
        check = ["pki", "check", "--cert", str(f.cert), "--ca", str(f.ca), "--key", str(f.key)]
        check += ["--cn", self.cn]
        if phase == "switch":
            check += ["--issuer", "first"]
        if self.sans:
            check += ["--san", *self.sans]
        if cli.main(check) != 0:
            pki.make_csr(f.key, f.csr, self.cn, self.sans)
            pki.sign(signing, f.csr, f.cert, usage=self.usage)
            changed = True
        return changed


def _roll(
    cluster: LocalCluster, ca_dir: Path, boards: dict[str, Host], scheduler: Host | None, pid_file: Path
) -> list[str]:
    """site.yml's roll: boards one at a time, then the scheduler by a handover. The hosts that changed."""
    changed = []
    for name, host in boards.items():
        if host.converge(ca_dir):
            changed.append(name)
            cluster.restart_agent(name)
            wait_for(f"{name} UP", lambda name=name: board_states(cluster)[name] == "UP", 30)
    if scheduler is not None and scheduler.converge(ca_dir):
        changed.append("scheduler")
        before = handover.read_pid(pid_file)
        done = handover_command(cluster)
        assert done.returncode == 0, done.stderr
        successor = handover.read_pid(pid_file)
        assert successor not in (None, before)
        wait_for("the old scheduler gone", lambda: before is None or not running(before), 30)
    return changed


def _call(address: str, who: pki.Issued, trust: Path, admin: bool = False) -> grpc.StatusCode | None:
    """One call presenting ``who`` and trusting ``trust``; None when it succeeds, else its code."""
    config = security.TlsConfig(ca=str(trust), cert=str(who.cert), key=str(who.key))
    with grpc.secure_channel(address, security.channel_credentials(config)) as channel:
        try:
            if admin:
                rpc.ClusterStub(channel).SetPolicy(pb.SetPolicyRequest(policy="least_inflight"), timeout=5)
            else:
                rpc.NodeStub(channel).GetStatus(pb.NodeStatusRequest(), timeout=5)
        except grpc.RpcError as exc:
            return exc.code()  # type: ignore[attr-defined,no-any-return]
    return None


def _served(cluster: LocalCluster) -> dict[str, int]:
    return {name: agent_served(cluster.agents[name].address) for name in BOARDS}


def _served_more(cluster: LocalCluster) -> None:
    """The scheduler forwards to every board (its client certificate accepted, theirs trusted): each
    board's count of served requests grows (counted from now: a restarted agent starts from 0)."""
    since = _served(cluster)
    wait_for(
        "every board served through the scheduler",
        lambda: all(n > since[name] for name, n in _served(cluster).items()),
        20,
    )


class Loads:
    """Central closed-loop load, one client at a time. A gRPC client reads its TLS files when it
    connects, so after its files change (the bundle before the switch, a new certificate before the
    finish) a new client takes over and the previous one is ended once the new one runs."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.running: list[tuple[BackgroundLoad, threading.Event]] = []

    def take_over(self) -> None:
        stop = threading.Event()
        load = BackgroundLoad(
            self.cluster.address, [FRAME], 6, 0.5, 300.0, time.perf_counter(), mode="scheduler", stop=stop
        )
        load.start()
        time.sleep(2.0)  # connected and past its warm-up
        for _, previous in self.running:
            previous.set()
        self.running.append((load, stop))

    def results(self) -> list[tuple[int, int, dict[str, int], float]]:
        for _, stop in self.running:
            stop.set()
        return [failures(load) for load, _ in self.running]


def test_a_ca_rotation_in_three_rolled_phases_fails_no_request(tmp_path: Path) -> None:
    ca_dir = tmp_path / "pki"
    pki.make_ca(ca_dir)
    agent_sans = ["127.0.0.1", security.AGENT_FLEET_NAME]
    boards = {name: Host(tmp_path, "agent", name, agent_sans, "server-and-client") for name in BOARDS}
    scheduler = Host(tmp_path, "scheduler", "npudure-scheduler", ["127.0.0.1"], "server-and-client")
    client = Host(tmp_path, "admin", "npudure-admin", [], "client-only")  # the operator's
    for host in [*boards.values(), scheduler, client]:
        host.converge(ca_dir)  # the first site.yml
    old_admin = pki.issue(ca_dir, "npudure-admin", [], tmp_path / "old-admin", usage="client-only")
    trust, new_ca = ca_dir / ca_rotation.TRUST, ca_dir / ca_rotation.NEXT / pki.CA_CERT
    workdir = tmp_path / "run"
    pid_file = workdir / handover.PID_NAME
    successor = None
    with pytest.MonkeyPatch.context() as mp:
        as_client(mp, client.files)
        try:
            with LocalCluster(
                boards=len(BOARDS),
                time_scale=3.0,
                workdir=workdir,
                scheduler_overrides={"tls": scheduler.tls(), "state_file": str(workdir / "state.json")},
                per_board_overrides={name: {"tls": host.tls()} for name, host in boards.items()},
            ) as cluster:
                loads = Loads(cluster)
                loads.take_over()

                # start: both CAs trusted everywhere (every host restarted once), nothing re-issued.
                assert ca_rotation.advance(ca_dir, "start").changed
                assert _roll(cluster, ca_dir, boards, scheduler, pid_file) == [*BOARDS, "scheduler"]
                _served_more(cluster)
                assert client.converge(ca_dir)  # the bundle, not a new certificate
                assert client.files.ca.read_bytes() == trust.read_bytes()
                loads.take_over()
                assert not ca_rotation.advance(ca_dir, "start").changed  # a re-run changes nothing
                assert _roll(cluster, ca_dir, boards, scheduler, pid_file) == []

                # switch: every certificate re-issued from the new CA, one host at a time. After the
                # first board, board1 (new CA) and the scheduler (old CA) accept each other both ways.
                assert ca_rotation.advance(ca_dir, "switch").changed
                assert client.converge(ca_dir)  # the operator's admin certificate, on the controller
                loads.take_over()
                assert _roll(cluster, ca_dir, {"board1": boards["board1"]}, None, pid_file) == ["board1"]
                _served_more(cluster)
                assert _roll(cluster, ca_dir, boards, scheduler, pid_file) == ["board2", "scheduler"]
                _served_more(cluster)
                for host in [*boards.values(), scheduler, client]:
                    pki.load_certificate(host.files.cert).verify_directly_issued_by(
                        pki.load_certificate(new_ca)
                    )
                # The window: clients of either CA accepted by the scheduler (new CA) and a board.
                for who in (old_admin, client.files):
                    assert _call(cluster.address, who, trust, admin=True) is None
                    assert _call(cluster.agents["board2"].address, who, trust) is None
                assert not ca_rotation.advance(ca_dir, "switch").changed
                assert _roll(cluster, ca_dir, boards, scheduler, pid_file) == []

                # finish: the new CA alone; nothing re-issued, every host restarted once.
                assert ca_rotation.advance(ca_dir, "finish").changed
                assert _roll(cluster, ca_dir, boards, scheduler, pid_file) == [*BOARDS, "scheduler"]
                _served_more(cluster)
                assert not ca_rotation.advance(ca_dir, "finish").changed
                assert _roll(cluster, ca_dir, boards, scheduler, pid_file) == []
                # A certificate of the old CA is refused now, by the scheduler and by a board.
                for address, admin in ((cluster.address, True), (cluster.agents["board1"].address, False)):
                    assert _call(address, old_admin, trust, admin) == grpc.StatusCode.UNAVAILABLE
                    assert _call(address, client.files, trust, admin) is None
                results = loads.results()
                successor = handover.read_pid(pid_file)
        finally:
            if successor:
                stop_pid(successor)
    failed = sum(r[0] for r in results)
    total = sum(r[1] for r in results)
    print(
        f"CA rotation, start+switch+finish rolled (2 sim boards, time scale 3, central, concurrency 6, "
        f"shared 2-core host): {failed}/{total} failed, longest gap {max(r[3] for r in results):.2f}s"
    )
    assert total > 100
    assert failed == 0, [r[2] for r in results]
