"""Changing the fleet under load costs no request: an agent stopped with SIGTERM (graceful stop),
boards added and removed by a reload, and a scheduler restart that keeps its drains and policy.

Real scheduler and sim agents on loopback, real SIGTERM, the unit's own reload command; load from
the fault suite's generator in central mode (through the scheduler, with the clients' retry config)
and proxyless (straight to the boards on the scheduler's route).
"""

from __future__ import annotations

import threading
import time

import grpc
import pytest
from helpers.fleet_ops import (
    agent_served,
    board_states,
    failures,
    reload,
    route_boards,
    sigterm,
    start_load,
    status,
    wait_for,
    write_boards,
)
from helpers.loadgen import frame_bytes
from helpers.mtls_cluster import as_client, tls_section

import npudure
from npudure.proto import contract
from npudure.proto import inference_pb2 as pb
from npudure.proto import inference_pb2_grpc as rpc
from npudure.security import access as security
from npudure.security import pki
from npudure_workshop.lab.local import LocalCluster, wait_serving

MODES = ["scheduler", "proxyless"]


def _cluster(**kwargs) -> LocalCluster:
    return LocalCluster(boards=3, time_scale=3.0, log_level="INFO", **kwargs)


@pytest.mark.parametrize("mode", MODES)
def test_an_agent_stopped_with_sigterm_costs_no_request(mode: str) -> None:
    with _cluster() as cluster:
        load = start_load(cluster, mode, duration_s=7.0)
        time.sleep(2.0)
        board2 = cluster.agents["board2"]
        stopped = time.monotonic()
        sigterm(board2)
        took = time.monotonic() - stopped
        wait_for("the scheduler to take board2 out", lambda: board_states(cluster)["board2"] == "DOWN")
        cluster.restart_agent("board2")
        failed, total, errors, gap = failures(load)
        logs = cluster.logs("board2")
    print(f"{mode}: SIGTERM of board2 under load: {failed}/{total} failed, longest gap {gap:.2f}s")
    assert total > 50
    assert failed == 0, errors
    assert "draining for 1.5s" in logs  # NOT_SERVING first, then the pause, then the stop
    assert took >= 1.5


@pytest.mark.parametrize("mode", MODES)
def test_boards_join_and_leave_by_reload_under_load(mode: str) -> None:
    with _cluster(scheduler_overrides={"health_interval_s": 0.2}) as cluster:
        boards = [(p.name, p.address) for p in cluster.agents.values()]
        board4 = cluster.add_agent("board4")
        load = start_load(cluster, mode, duration_s=12.0)
        time.sleep(1.5)

        write_boards(cluster, [*boards, ("board4", board4.address)])
        added = reload(cluster)
        assert added.returncode == 0, added.stderr
        assert "added board4" in added.stdout
        wait_for("board4 UP", lambda: board_states(cluster).get("board4") == "UP")
        assert "board4" in route_boards(cluster)
        served = agent_served(board4.address)
        wait_for("board4 to serve", lambda: agent_served(board4.address) > served + 5)

        write_boards(cluster, [*boards[:2], ("board4", board4.address)])
        removed = reload(cluster)
        assert removed.returncode == 0, removed.stderr
        assert "removing board3" in removed.stdout
        assert "board3" not in route_boards(cluster)  # proxyless clients move at once
        wait_for("board3 to leave", lambda: "board3" not in board_states(cluster))
        failed, total, errors, gap = failures(load)
        log = cluster.logs("scheduler")
    print(f"{mode}: add board4 + remove board3 under load: {failed}/{total} failed, longest gap {gap:.2f}s")
    assert total > 50
    assert failed == 0, errors
    assert "board board3 (" in log and "has left the scheduler" in log


def test_a_bad_board_list_fails_the_reload_and_the_scheduler_keeps_its_boards() -> None:
    with LocalCluster(boards=2, time_scale=3.0) as cluster:
        boards = [(p.name, p.address) for p in cluster.agents.values()]
        for bad, why in (
            ([*boards, ("board1", "127.0.0.1:1")], "appears twice"),
            ([*boards, ("board3", "boadr3.invalid:50051")], "cannot resolve boadr3.invalid"),
            ([*boards, ("board3", "10.0.0.13:5OO51")], "is not host:port"),
            ([(boards[0][0], "127.0.0.1:2"), boards[1]], "moved from"),
        ):
            write_boards(cluster, bad)
            done = reload(cluster)
            lines = done.stderr.strip().splitlines()
            assert done.returncode != 0 and len(lines) == 1, done.stderr
            assert why in lines[0] and "keeps its current boards" in lines[0], lines
            assert "Traceback" not in done.stderr
            assert sorted(board_states(cluster)) == ["board1", "board2"]
            assert set(board_states(cluster).values()) == {"UP"}


def test_a_scheduler_restart_costs_central_clients_nothing_and_keeps_drains_policy_and_lease(
    tmp_path,
) -> None:
    with _cluster(
        workdir=tmp_path, scheduler_overrides={"state_file": str(tmp_path / "state.json")}
    ) as cluster:
        with security.channel(cluster.address) as channel:
            admin = rpc.ClusterStub(channel)
            admin.DrainNode(pb.DrainNodeRequest(node="board3", drain=True), timeout=5)
            admin.SetPolicy(pb.SetPolicyRequest(policy="round_robin"), timeout=5)
            admin.AcquireLease(pb.LeaseRequest(holder="bench on host", ttl_s=300), timeout=5)
        load = start_load(cluster, "scheduler", duration_s=8.0)
        time.sleep(2.0)
        sigterm(cluster.scheduler)
        cluster._spawn(cluster.scheduler, "scheduler")  # the same port, the same config and state file
        wait_serving(cluster.address, 60, cluster.scheduler.process)
        failed, total, errors, gap = failures(load)
        after = status(cluster)
    print(f"central: scheduler restart under load: {failed}/{total} failed, longest gap {gap:.2f}s")
    assert total > 50
    assert failed == 0, errors
    assert after.policy == "round_robin"
    assert after.lease_holder == "bench on host"
    assert {b.name: contract.board_state_label(b.state) for b in after.boards}["board3"] == "DRAINING"


def test_the_reload_command_reaches_a_tls_scheduler_with_its_own_identity(tmp_path, monkeypatch) -> None:
    ca = tmp_path / "ca"
    pki.make_ca(ca)
    agent = tls_section(pki.issue(ca, "board", ["127.0.0.1"], tmp_path / "agent"))
    scheduler = tls_section(pki.issue(ca, "npudure-scheduler", ["127.0.0.1"], tmp_path / "scheduler"))
    admin = {"token_file": str(security.write_token(tmp_path / "admin-token"))}
    as_client(monkeypatch, pki.issue(ca, "npudure-admin", [], tmp_path / "admin", usage="client"))
    monkeypatch.setenv(security.ENV_TOKEN, admin["token_file"])
    with LocalCluster(
        boards=2,
        time_scale=5.0,
        agent_overrides={"tls": agent, "admin": {**admin, "identities": ["npudure-scheduler"]}},
        scheduler_overrides={"tls": scheduler, "admin": admin},
    ) as cluster:
        write_boards(cluster, [("board1", cluster.agents["board1"].address)])
        done = reload(cluster)
        assert done.returncode == 0, done.stderr
        assert "removing board2" in done.stdout
        wait_for("board2 to leave", lambda: list(board_states(cluster)) == ["board1"])


def test_npudure_connect_in_central_mode_rides_out_a_scheduler_restart() -> None:
    request = pb.InferRequest(encoding=pb.ENCODING_RAW_RGB, frame=frame_bytes())
    served, errors = [], []
    stop = threading.Event()
    with (
        LocalCluster(boards=2, time_scale=3.0) as cluster,
        npudure.connect(cluster.address, mode="central") as client,
    ):

        def worker() -> None:
            while not stop.is_set():
                try:
                    served.append(client.infer(request, timeout=15).node)
                except grpc.RpcError as exc:
                    errors.append(f"{exc.code().name}: {exc.details()}")

        threads = [threading.Thread(target=worker) for _ in range(3)]
        for thread in threads:
            thread.start()
        time.sleep(1.5)
        before = len(served)
        cluster.restart_scheduler()
        time.sleep(1.5)
        stop.set()
        for thread in threads:
            thread.join(30)
    assert before > 5 and len(served) > before + 5
    assert errors == []
