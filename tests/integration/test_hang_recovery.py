"""A hung NPU context is replaced in a real agent process, by itself (the pool's own recovery logic, with
fake contexts, is tests/unit/agent/test_pool_recovery.py)."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import numpy as np
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc

from npudure.proto import inference_pb2 as pb
from npudure.proto import inference_pb2_grpc as rpc
from npudure.security import access as security
from npudure_workshop.lab.local import _terminate, free_port, wait_serving

FRAME = np.zeros((640, 640, 3), dtype=np.uint8)


def _status(address: str) -> pb.NodeStatus:
    with grpc.insecure_channel(address) as channel:
        return rpc.NodeStub(channel).GetStatus(pb.NodeStatusRequest(), timeout=5)


def _health(address: str) -> int:
    with grpc.insecure_channel(address) as channel:
        return health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5).status


def _infer(address: str, timeout_s: float) -> pb.InferResponse:
    with grpc.insecure_channel(address) as channel:
        request = pb.InferRequest(request_id="r", encoding=pb.ENCODING_RAW_RGB, frame=FRAME.tobytes())
        return rpc.InferenceStub(channel).Infer(request, timeout=timeout_s)


@pytest.mark.timeout(120)
def test_agent_recovers_from_an_npu_hang_by_itself(tmp_path: Path) -> None:
    address, metrics_port = f"127.0.0.1:{free_port()}", free_port()
    token = security.write_token(tmp_path / "admin-token")  # InjectFault is an admin call
    admin = (("authorization", f"Bearer {token.read_text().strip()}"),)
    config = tmp_path / "agent.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "node_name": "hangs",
                "listen": address,
                "metrics_port": metrics_port,
                "backend": "sim",
                "npu_cores": 2,
                "contexts": 2,  # two stuck frames hang every context
                "hang_timeout_s": 1.0,
                "hang_recovery_s": 1.5,
                "affinity": {"sysfs_root": str(tmp_path / "no-sysfs")},
                "admin": {"token_file": str(token)},
            }
        )
    )
    log = tmp_path / "agent.log"
    with log.open("wb") as out:
        agent = subprocess.Popen(
            [sys.executable, "-m", "npudure", "agent", "--config", str(config)], stdout=out, stderr=out
        )
    pool = ThreadPoolExecutor(2)
    try:
        wait_serving(address, 60, agent)
        assert _infer(address, 10).node == "hangs"
        with grpc.insecure_channel(address) as channel:
            rpc.NodeStub(channel).InjectFault(
                pb.InjectFaultRequest(fault=pb.FAULT_HANG), timeout=5, metadata=admin
            )
        stuck = [pool.submit(_infer, address, 60) for _ in range(2)]  # both NPU contexts hang
        # First the hang shows (the scheduler takes the board out), then the board recovers alone.
        deadline = time.monotonic() + 20
        while _health(address) != health_pb2.HealthCheckResponse.NOT_SERVING:
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        assert _status(address).hung_workers == 2
        while _status(address).context_recoveries < 2:
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        # Fault still injected, nobody restarted anything: new contexts serve and health is SERVING.
        assert all(not f.done() for f in stuck)
        reply = _infer(address, 10)
        assert reply.node == "hangs" and reply.timing.npu_input_us > 0
        assert _health(address) == health_pb2.HealthCheckResponse.SERVING
        status = _status(address)
        assert (status.hung_workers, status.context_recoveries) == (0, 2)
        body = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
        assert re.search(r"^npudure_agent_context_recoveries_total 2\.0$", body, re.M), body
        # Clearing the fault lets the hung calls return; their old contexts are released.
        with grpc.insecure_channel(address) as channel:
            rpc.NodeStub(channel).InjectFault(
                pb.InjectFaultRequest(fault=pb.FAULT_NONE), timeout=5, metadata=admin
            )
        for future in stuck:
            future.result(timeout=20)
        deadline = time.monotonic() + 10
        while log.read_text().count("its old context is released") < 2:
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        _terminate(agent)
