"""A hung NPU context is replaced: in the worker pool (fake contexts) and in a real agent process."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import numpy as np
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc

from npudure.agent.pool import Outcome, WorkerPool
from npudure.backends.base import NO_DETECTIONS, Context, ContextResult
from npudure.lab.local import _terminate, free_port, wait_serving
from npudure.proto import inference_pb2 as pb
from npudure.proto import inference_pb2_grpc as rpc
from npudure.security import access as security

FRAME = np.zeros((640, 640, 3), dtype=np.uint8)


class GatedContext(Context):
    """Blocks in run() while its gate is closed; records overlap, so sharing a context would show."""

    def __init__(self, name: str, gate: threading.Event) -> None:
        self.name = name
        self.gate = gate
        self.active = 0
        self.max_active = 0
        self.runs = 0
        self.closed = False
        self._lock = threading.Lock()

    def run(self, image: np.ndarray) -> ContextResult:
        assert not self.closed, f"{self.name} ran after it was released"
        with self._lock:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        try:
            self.gate.wait(30)
            self.runs += 1
            return ContextResult(NO_DETECTIONS, 0.0, 0.0, 0.0)
        finally:
            with self._lock:
                self.active -= 1

    def close(self) -> None:
        self.closed = True


async def _wait_for(predicate, timeout_s: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


async def _one_hung_call() -> tuple[threading.Event, WorkerPool, asyncio.Future[Outcome]]:
    """A one-slot pool whose context blocks on ``stuck``, with one call in it, already hung."""
    stuck = threading.Event()
    pool = WorkerPool([GatedContext("a", stuck)], queue_limit=8)
    call = asyncio.ensure_future(pool.run(lambda: FRAME))
    await _wait_for(lambda: pool.hung(0.0) == 1)
    return stuck, pool, call


def test_pool_replaces_a_hung_context_and_releases_it_when_its_call_returns() -> None:
    async def scenario() -> None:
        stuck = threading.Event()
        open_gate = threading.Event()
        open_gate.set()
        old = GatedContext("old", stuck)
        made: list[GatedContext] = []

        def new_context(index: int) -> Context:
            made.append(GatedContext(f"new{index}", open_gate))
            return made[-1]

        pool = WorkerPool([old], queue_limit=8)
        hung_call = asyncio.ensure_future(pool.run(lambda: FRAME))
        await _wait_for(lambda: pool.hung(0.05) == 1)
        assert pool.recover_hung(10.0, new_context) == 0  # not hung long enough yet
        await asyncio.sleep(0.1)
        assert pool.recover_hung(0.05, new_context) == 1
        assert (pool.recoveries, pool.abandoned, pool.hung(0.05), len(made)) == (1, 1, 0, 1)
        # The slot serves again while the old call is still stuck.
        for _ in range(3):
            await asyncio.wait_for(pool.run(lambda: FRAME), 10)
        assert made[0].runs == 3 and old.runs == 0 and not old.closed
        # The hung call returns: its caller gets the result, the old context is released, never reused.
        stuck.set()
        await asyncio.wait_for(hung_call, 10)
        await _wait_for(lambda: old.closed)
        assert pool.abandoned == 0
        await asyncio.gather(*(pool.run(lambda: FRAME) for _ in range(4)))
        assert old.runs == 1 and made[0].runs == 7
        assert old.max_active == 1 and made[0].max_active == 1
        pool.close()
        assert made[0].closed

    asyncio.run(scenario())


def test_pool_abandons_no_more_hung_calls_than_it_has_slots() -> None:
    async def scenario() -> None:
        stuck, pool, first = await _one_hung_call()
        assert pool.recover_hung(0.0, lambda i: GatedContext("b", stuck)) == 1
        second = asyncio.ensure_future(pool.run(lambda: FRAME))
        await _wait_for(lambda: pool.hung(0.0) == 1)
        # One call already abandoned on a one-slot pool: the second hang stays (health NOT_SERVING).
        assert pool.recover_hung(0.0, lambda i: GatedContext("c", stuck)) == 0
        assert pool.hung(0.0) == 1 and pool.recoveries == 1
        stuck.set()
        await asyncio.wait_for(asyncio.gather(first, second), 10)
        pool.close()

    asyncio.run(scenario())


def test_a_failing_re_creation_leaves_the_slot_hung() -> None:
    async def scenario() -> None:
        stuck, pool, call = await _one_hung_call()

        def broken(index: int) -> Context:
            raise RuntimeError("init_runtime returned -1")

        with pytest.raises(RuntimeError):
            pool.recover_hung(0.0, broken)
        assert pool.hung(0.0) == 1 and pool.recoveries == 0 and pool.abandoned == 0
        stuck.set()
        await asyncio.wait_for(call, 10)
        pool.close()

    asyncio.run(scenario())


# ---------------------------------------------------------------- a real agent process


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
