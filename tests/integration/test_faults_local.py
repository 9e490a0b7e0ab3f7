"""Faults on a loopback cluster: an NPU hang and a scheduler restart (real processes)."""

from __future__ import annotations

import time

import grpc
import pytest
from helpers.loadgen import frame_bytes, run_closed_loop

from npudure.proto import inference_pb2 as pb
from npudure.proto import inference_pb2_grpc as rpc
from npudure.security import access as security
from npudure_workshop.lab.local import LocalCluster

TIME_SCALE = 10.0


def board_state(address: str, name: str) -> int:
    with security.channel(address) as channel:
        status = rpc.ClusterStub(channel).GetClusterStatus(pb.ClusterStatusRequest(), timeout=5)
    return next(b.state for b in status.boards if b.name == name)


def inject(address: str, fault: int) -> None:
    with security.channel(address) as channel:
        rpc.NodeStub(channel).InjectFault(pb.InjectFaultRequest(fault=fault), timeout=5)


@pytest.mark.slow
def test_npu_hang_costs_no_request_and_the_board_comes_back() -> None:
    """A board whose inference stops returning: deadline + retry absorb it, health takes it out."""
    with LocalCluster(
        boards=3,
        time_scale=TIME_SCALE,
        agent_overrides={"hang_timeout_s": 1.0},
        scheduler_overrides={"board_timeout_s": 1.5},
    ) as cluster:
        hung = cluster.agents["board2"].address
        injected = {}

        def tick(elapsed: float) -> None:
            if elapsed > 1.0 and not injected:
                injected["at"] = elapsed
                inject(hung, pb.FAULT_HANG)

        result = run_closed_loop(cluster.address, concurrency=6, duration_s=6.0, on_tick=tick)
        assert injected
        assert result.errors == [], result.errors[:3]
        assert board_state(cluster.address, "board2") == pb.BOARD_STATE_DOWN
        with security.channel(hung) as channel:
            status = rpc.NodeStub(channel).GetStatus(pb.NodeStatusRequest(), timeout=5)
        assert status.hung_workers > 0
        inject(hung, pb.FAULT_NONE)
        deadline = time.monotonic() + 20
        while board_state(cluster.address, "board2") != pb.BOARD_STATE_UP and time.monotonic() < deadline:
            time.sleep(0.2)
        assert board_state(cluster.address, "board2") == pb.BOARD_STATE_UP
        after = run_closed_loop(cluster.address, concurrency=6, duration_s=3.0)
        assert after.errors == [] and "board2" in after.nodes


def test_fault_injection_is_refused_on_real_backends() -> None:
    from npudure.backends.base import Backend, BackendError

    class Real(Backend):
        name = "rknn"

        @property
        def contexts(self):
            return []

    with pytest.raises(BackendError, match="emulated boards"):
        Real().inject_fault(True)


@pytest.mark.slow
def test_scheduler_restart_gives_unavailable_never_a_hang() -> None:
    with LocalCluster(boards=2, time_scale=TIME_SCALE) as cluster:
        proc = cluster.scheduler
        request = pb.InferRequest(encoding=pb.ENCODING_RAW_RGB, frame=frame_bytes())
        channel = security.channel(cluster.address, options=[("grpc.max_send_message_length", 8 << 20)])
        infer = rpc.InferenceStub(channel)
        assert infer.Infer(request, timeout=10).node
        proc.process.kill()
        proc.process.wait(timeout=10)
        start = time.monotonic()
        with pytest.raises(grpc.RpcError) as err:
            infer.Infer(request, timeout=10)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert time.monotonic() - start < 5, "a dead scheduler must fail fast, not hang"
        cluster.restart_scheduler()
        # Boards are back in rotation within seconds. The client's channel is in reconnect back-off after
        # the refused connection: a client that waits for ready (as retrying clients should) gets through.
        served = {infer.Infer(request, timeout=10, wait_for_ready=True).node for _ in range(6)}
        assert served == {"board1", "board2"}
        channel.close()
