"""Integration: `npudure bench --api zmq` drives the scheduler's Frigate zmq endpoint as Frigate's
detectors do, and every answered frame is attributed to its board with its stage timing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers.bench_api import openloop_through
from helpers.cli import run_npudure

from npudure_workshop.lab.local import LocalCluster


@pytest.fixture(scope="module")
def cluster():
    # Frigate's 200 ms deadline would drop every frame of boards 10x slower than the sim's NPU.
    slow = {"zmq_api": {"request_timeout_ms": 5000}}
    with LocalCluster(boards=2, time_scale=10.0, zmq_api=True, scheduler_overrides=slow) as running:
        yield running


def test_bench_openloop_through_the_zmq_endpoint(cluster, tmp_path: Path) -> None:
    endpoint = cluster.zmq_endpoint
    options = ("--zmq-endpoint", endpoint, "--frame-size", "320")
    manifest, run = openloop_through(cluster.address, tmp_path / "zmq", "zmq", *options)
    assert manifest["settings"]["zmq_endpoint"] == endpoint
    assert "320x320 uint8 nhwc" in manifest["frames"]["frame_source"]
    with np.load(run / "samples.npz") as samples:  # each answer's board, from the reply header
        assert set(samples["node_names"]) == {"board1", "board2"}
        answered = samples["status_code"] == 0
        assert answered.sum() >= 10 and (samples["node_idx"][answered] >= 0).all()
        assert samples["emulated"][answered].all()  # the sim boards say so, through the header


def test_bench_refuses_zmq_with_proxyless() -> None:
    proc = run_npudure(
        "bench", "openloop", "--target", "127.0.0.1:1", "--rates", "10",
        "--api", "zmq", "--mode", "proxyless",
    )  # fmt: skip
    assert proc.returncode != 0 and "--api zmq goes through the scheduler" in proc.stderr


def test_bench_tells_an_unanswered_zmq_endpoint_in_one_line(cluster, tmp_path: Path) -> None:
    proc = run_npudure(
        "bench", "openloop", "--target", cluster.address, "--rates", "10", "--quick",
        "--api", "zmq", "--zmq-endpoint", "tcp://127.0.0.1:9", "--out", str(tmp_path / "x"),
        "--progress", "quiet",
        timeout_s=120,
    )  # fmt: skip
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert "no answer from the zmq endpoint at tcp://127.0.0.1:9" in proc.stderr, proc.stderr[-2000:]
