"""The agent's per-stage CPU account: what it adds up, what it exports, whose clock it reads."""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from helpers.pool import IdleBackend
from prometheus_client import CollectorRegistry, generate_latest

from npudure.agent import server as agent_server
from npudure.agent.cpu_account import STAGES, THREADS, CpuAccount, CpuCollector
from npudure.agent.pool import _worker_cpu
from npudure.backends.base import ContextResult
from npudure.config import AgentConfig
from npudure.proto import inference_pb2 as pb


def test_stages_add_up_by_thread_and_export_bounded_series() -> None:
    account = CpuAccount()
    account.add("parse", "loop", 2_000_000)
    account.add("parse", "loop", 1_000_000)
    account.add_worker({"npu_input": 5_000_000, "inference": 1_000_000})
    account.frames = 3
    registry = CollectorRegistry()
    registry.register(CpuCollector(account))
    text = generate_latest(registry).decode()
    assert 'npudure_agent_stage_cpu_seconds_total{stage="parse",thread="loop"} 0.003' in text
    assert 'npudure_agent_stage_cpu_seconds_total{stage="npu_input",thread="worker"} 0.005' in text
    assert "npudure_agent_stage_cpu_frames_total 3.0" in text
    assert text.count("npudure_agent_stage_cpu_seconds_total{") == len(STAGES) * len(THREADS)


def test_the_loop_clock_is_the_bound_threads_not_the_readers() -> None:
    account = CpuAccount()
    burned = threading.Event()
    done = threading.Event()

    def loop_thread() -> None:
        account.bind_loop()
        start = time.thread_time()
        while time.thread_time() - start < 0.05:  # 50 ms of this thread's CPU
            pass
        burned.set()
        done.wait(10)

    thread = threading.Thread(target=loop_thread)
    thread.start()
    try:
        assert burned.wait(10)
        reader_before = time.thread_time()
        loop_cpu = account.loop_seconds()
        assert loop_cpu is not None and loop_cpu >= 0.05
        assert time.thread_time() - reader_before < 0.05  # the reader itself did not burn it
    finally:
        done.set()
        thread.join()


def test_worker_cpu_counts_the_rest_of_run_as_inference() -> None:
    result = ContextResult(np.zeros((0, 6), np.float32), 0, 0, 0, 0, {"npu_input": 300, "postprocess": 200})
    assert _worker_cpu(result, 1_000) == {"npu_input": 300, "postprocess": 200, "inference": 500}
    bare = ContextResult(np.zeros((0, 6), np.float32), 0, 0, 0)  # a backend that measures nothing
    assert _worker_cpu(bare, 700) == {"inference": 700}
    assert _worker_cpu(result, 100)["inference"] == 0  # clock granularity never makes it negative


class _Context:
    """What Agent.Infer touches of a gRPC context on an OK frame."""

    def set_trailing_metadata(self, metadata) -> None:
        self.trailing = metadata

    async def abort(self, code, message):
        raise AssertionError(f"{code}: {message}")


async def test_the_reply_stage_is_counted_once_per_ok_frame(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The reply's CPU (its build, bookkeeping and serialization, all in Infer) is one span counted once
    a frame. The agent's clock reads are made to tick 1 µs apart, so each timed span is 1 µs."""
    ticks = itertools.count(step=1_000)
    monkeypatch.setattr(agent_server, "now_ns", lambda: next(ticks))
    agent = agent_server.Agent(
        AgentConfig(node_name="t", metrics_port=0, affinity={"sysfs_root": str(tmp_path)}), IdleBackend()
    )
    request = pb.InferRequest(encoding=pb.ENCODING_RAW_RGB, frame=bytes(640 * 640 * 3))
    try:
        for frames in (1, 2):
            data = await agent.Infer(request, _Context())  # type: ignore[arg-type]
            assert pb.InferResponse.FromString(data).node == "t"  # the reply leaves serialized
            assert agent.cpu.frames == frames
            # One 1 µs span per frame: a second count (or a second span) would show as 2 µs.
            assert agent.cpu.seconds()[("reply", "loop")] == pytest.approx(frames * 1e-6)
            assert agent.cpu.seconds()[("check", "loop")] == pytest.approx(frames * 1e-6)
    finally:
        agent.pool.close()
        agent.decoder.close()
