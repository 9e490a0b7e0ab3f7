"""The agent's NodeStatus: the real NPU core count, its contexts, and where that count came from."""

from __future__ import annotations

from helpers.echo_contexts import EchoBackend

from npudure.agent.server import Agent
from npudure.board import soc
from npudure.config import AgentConfig


async def test_status_reports_contexts_apart_from_npu_cores() -> None:
    config = AgentConfig(node_name="b1", backend="rknn", model="/m/x.rknn", npu_cores=2, metrics_port=0)
    rk3576 = soc.Soc("rk3576", 2, "test")
    agent = Agent(config, EchoBackend(8), board_soc=rk3576)
    try:
        status = agent.status()
        assert (status.npu_cores, status.contexts) == (2, 8)
        assert status.contexts_source == "RK3576 default, measured"  # resolved when serve() was not told
    finally:
        agent.pool.close()
    told = Agent(config, EchoBackend(3), board_soc=rk3576, contexts_source="agent config")
    try:
        assert (told.status().contexts, told.status().contexts_source) == (3, "agent config")
    finally:
        told.pool.close()
