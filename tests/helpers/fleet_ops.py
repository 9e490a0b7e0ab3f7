"""Helpers for the fleet-change tests: load in either mode, the longest stretch without a reply,
reload through the unit's own command, and agents started beside a LocalCluster."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import yaml

from npudure.proto import contract
from npudure.proto import inference_pb2 as pb
from npudure.proto import inference_pb2_grpc as rpc
from npudure.security import access as security
from npudure_workshop.faults.background import BackgroundLoad
from npudure_workshop.lab.local import LocalCluster, Proc

FRAME = pb.InferRequest(
    encoding=pb.ENCODING_RAW_RGB, frame=np.zeros((640, 640, 3), np.uint8).tobytes()
).SerializeToString()


def start_load(cluster: LocalCluster, mode: str, duration_s: float, concurrency: int = 6) -> BackgroundLoad:
    load = BackgroundLoad(
        cluster.address, [FRAME], concurrency, 0.5, duration_s, time.perf_counter(), mode=mode
    )
    load.start()
    return load


def failures(load: BackgroundLoad) -> tuple[int, int, dict[str, int], float]:
    """(failed, total, error messages, longest stretch in s without a successful reply) of a load."""
    result = load.join()
    samples = result.samples
    ok = np.sort(samples.done_s[samples.ok])
    gap = float(np.diff(ok).max()) if ok.size > 1 else float("inf")
    if result.replayed:  # not failures (a retrying client replays them too), but worth seeing
        print(f"replayed once after a server stop closed their connection: {result.replayed}")
    return int((~samples.ok).sum()), len(samples), result.error_messages, gap


def sigterm(proc: Proc, timeout_s: float = 30.0) -> None:
    assert proc.process is not None
    proc.process.send_signal(signal.SIGTERM)
    proc.process.wait(timeout=timeout_s)


def status(cluster: LocalCluster) -> pb.ClusterStatus:
    with security.channel(cluster.address) as channel:
        return rpc.ClusterStub(channel).GetClusterStatus(pb.ClusterStatusRequest(), timeout=5)


def board_states(cluster: LocalCluster) -> dict[str, str]:
    return {b.name: contract.board_state_label(b.state) for b in status(cluster).boards}


def route_boards(cluster: LocalCluster) -> list[str]:
    with security.channel(cluster.address) as channel:
        return [b.name for b in rpc.ClusterStub(channel).GetRoute(pb.RouteRequest(), timeout=5).boards]


def agent_served(address: str) -> int:
    with security.channel(address) as channel:
        return rpc.NodeStub(channel).GetStatus(pb.NodeStatusRequest(), timeout=5).served_total


def write_boards(cluster: LocalCluster, boards: list[tuple[str, str]]) -> None:
    assert cluster.scheduler is not None
    path: Path = cluster.scheduler.config_path
    config = yaml.safe_load(path.read_text())
    config["boards"] = [{"name": n, "address": a} for n, a in boards]
    path.write_text(yaml.safe_dump(config, sort_keys=False))


def scheduler_verb(
    cluster: LocalCluster, flag: str, timeout_s: float = 60
) -> subprocess.CompletedProcess[str]:
    """``npudure scheduler --config FILE <flag>`` against the cluster's scheduler, as its unit runs it."""
    assert cluster.scheduler is not None
    argv = [
        sys.executable,
        "-m",
        "npudure",
        "scheduler",
        "--config",
        str(cluster.scheduler.config_path),
        flag,
    ]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)


def reload(cluster: LocalCluster) -> subprocess.CompletedProcess[str]:
    """What ``systemctl reload npudure-scheduler`` runs (ExecReload)."""
    return scheduler_verb(cluster, "--reload")


def wait_for(what: str, condition, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"{what}: not within {timeout_s:.0f}s")
