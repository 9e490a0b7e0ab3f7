"""A scheduler handover with real processes on loopback: under central load the running scheduler
starts its successor on the same port, which serves, tells systemd MAINPID=/READY=1 (a real notify
socket here; PID 1 is not systemd) and takes over; the old process exits; no request fails. A successor
that cannot start (a config broken after the start) leaves the old process serving, with its reason."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
from helpers import fleet_ops
from helpers.fleet_ops import failures, start_load, wait_for
from helpers.handover import NotifySocket, handover_command, running, stop_pid

from npudure.proto import contract
from npudure.proto import inference_pb2 as pb
from npudure.proto import inference_pb2_grpc as rpc
from npudure.security import access as security
from npudure.service import handover
from npudure_workshop.lab.local import LocalCluster, free_port, wait_serving


def _cluster(tmp_path: Path) -> LocalCluster:
    return LocalCluster(
        boards=2,
        time_scale=3.0,
        workdir=tmp_path,
        log_level="INFO",
        scheduler_overrides={"state_file": str(tmp_path / "state.json")},
    )


def test_a_handover_under_central_load_fails_no_request_and_hands_systemd_the_new_pid(
    tmp_path, monkeypatch
) -> None:
    notify = NotifySocket(tmp_path / "notify")
    monkeypatch.setenv("NOTIFY_SOCKET", str(notify.path))
    successor = 0
    try:
        with _cluster(tmp_path) as cluster:
            assert cluster.scheduler is not None and cluster.scheduler.process is not None
            old = cluster.scheduler.process.pid
            try:
                load = start_load(cluster, "scheduler", duration_s=7.0)
                time.sleep(2.0)
                done = handover_command(cluster)
                assert done.returncode == 0, done.stderr
                successor = handover.read_pid(tmp_path / handover.PID_NAME) or 0
                assert successor not in (0, old)
                assert f"pid {successor} serves" in done.stdout
                assert cluster.scheduler.process.wait(timeout=30) == 0  # the predecessor exited cleanly
                failed, total, errors, gap = failures(load)
                wait_serving(cluster.address, 10)
                assert running(successor)
            finally:
                if successor:
                    stop_pid(successor)
        print(f"central: scheduler handover under load: {failed}/{total} failed, longest gap {gap:.2f}s")
        assert total > 50
        assert failed == 0, errors
        sent = notify.drain()
        from_successor = [fields for pid, fields in sent if pid == successor]
        assert any(f.get("MAINPID") == str(successor) and f.get("READY") == "1" for f in from_successor), sent
        # The predecessor never said STOPPING=1: systemd would take it for the new main process's.
        assert not any(pid == old and "STOPPING" in fields for pid, fields in sent), sent
        assert "handover" in cluster.logs("scheduler")
    finally:
        notify.close()


def test_a_successor_that_cannot_start_leaves_the_scheduler_serving(tmp_path) -> None:
    with _cluster(tmp_path) as cluster:
        assert cluster.scheduler is not None and cluster.scheduler.process is not None
        old = cluster.scheduler.process.pid
        config = cluster.scheduler.config_path
        good = config.read_text()
        load = start_load(cluster, "scheduler", duration_s=6.0)
        time.sleep(1.5)
        config.write_text(good + "policy: no_such_policy\n")
        # The command checks the file first: refused with the config's own error, nothing signalled.
        done = handover_command(cluster)
        assert done.returncode == 78, done.stderr
        assert done.stderr.startswith(
            "npudure scheduler: handover refused, the running scheduler keeps serving"
        )
        assert "'no_such_policy' is not allowed" in done.stderr
        assert "Traceback" not in done.stderr
        # The signal itself (what the command sends after its check): the successor exits 78, the
        # predecessor records why and keeps serving.
        os.kill(old, signal.SIGUSR2)
        status_path = tmp_path / handover.STATUS_NAME
        wait_for("the failed handover's status", lambda: handover.Status.read(status_path) is not None, 60)
        status = handover.Status.read(status_path)
        assert status is not None and not status.ok and status.predecessor == old
        assert "status 78" in status.reason and "'no_such_policy' is not allowed" in status.reason, status
        failed, total, errors, _ = failures(load)
        assert cluster.scheduler.process.poll() is None
        assert handover.read_pid(tmp_path / handover.PID_NAME) == old
        wait_serving(cluster.address, 5)
        config.write_text(good)
    assert total > 50
    assert failed == 0, errors
    assert "handover failed, this process" in cluster.logs("scheduler")


def test_the_http_api_and_metrics_ports_are_handed_over_too(tmp_path) -> None:
    metrics_port = free_port()
    cluster = LocalCluster(
        boards=1,
        workdir=tmp_path,
        http_api=True,
        scheduler_overrides={"state_file": str(tmp_path / "state.json"), "metrics_port": metrics_port},
    )
    successor = 0
    with cluster:
        assert cluster.scheduler is not None and cluster.scheduler.process is not None
        ping = cluster.http_url.replace("/v1/vision/detection", "/v1/server/status/ping")
        metrics = f"http://127.0.0.1:{metrics_port}/metrics"
        assert urllib.request.urlopen(ping, timeout=5).status == 200
        try:
            done = handover_command(cluster)
            assert done.returncode == 0, done.stderr  # the successor bound both ports beside the old one
            successor = handover.read_pid(tmp_path / handover.PID_NAME) or 0
            assert cluster.scheduler.process.wait(timeout=30) == 0
            assert urllib.request.urlopen(ping, timeout=5).status == 200
            assert b"npudure_scheduler" in urllib.request.urlopen(metrics, timeout=5).read()
        finally:
            if successor:
                stop_pid(successor)


def test_no_admin_change_is_lost_to_a_handover(tmp_path) -> None:
    """Changes sent while the old process hands over are refused there (UNAVAILABLE, "handing over"),
    not taken and lost; ``npudure admin drain`` retries and its drain is on the successor."""
    successor = 0
    with _cluster(tmp_path) as cluster:
        assert cluster.scheduler is not None and cluster.scheduler.process is not None
        try:
            # One connection, made before the handover: its calls reach the old process until GOAWAY.
            with security.channel(cluster.address) as channel:
                stub = rpc.ClusterStub(channel)
                stub.SetPolicy(pb.SetPolicyRequest(policy="p2c"), timeout=5)
                with ThreadPoolExecutor(1) as pool:
                    asked = pool.submit(handover_command, cluster)
                    refused = ""
                    deadline = time.monotonic() + 60
                    while not refused and time.monotonic() < deadline and not asked.done():
                        try:
                            stub.SetPolicy(pb.SetPolicyRequest(policy="p2c"), timeout=5)
                        except grpc.RpcError as exc:
                            if contract.HANDING_OVER in (exc.details() or ""):
                                refused = exc.details() or ""
                        time.sleep(0.02)
                    assert refused == f"SetPolicy: {contract.HANDING_OVER}", "no refusal seen"
                    # The operator's command in the same window: it retries until the successor takes it.
                    argv = [sys.executable, "-m", "npudure", "admin", "drain", "--node", "board1"]
                    drained = subprocess.run(
                        [*argv, "--target", cluster.address],
                        capture_output=True,
                        text=True,
                        timeout=60,
                    )
                    done = asked.result(timeout=120)
            assert done.returncode == 0, done.stderr
            assert drained.returncode == 0, drained.stderr
            successor = handover.read_pid(tmp_path / handover.PID_NAME) or 0
            assert cluster.scheduler.process.wait(timeout=30) == 0
            # Everything acknowledged is on the process that serves now.
            status = fleet_ops.status(cluster)
            assert status.policy == "p2c"
            assert fleet_ops.board_states(cluster)["board1"] == "DRAINING"
        finally:
            if successor:
                stop_pid(successor)
    assert "handing over to a new scheduler" in cluster.logs("scheduler")
