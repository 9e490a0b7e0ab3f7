"""An agent that serves two models, in-process with echo contexts: a request runs on the pool of the
model it names (the default for none), an unknown name is NOT_FOUND naming the served ones, and the
status reports each model's pool."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from helpers.echo_contexts import SIZE, EchoBackend, EchoContext
from prometheus_client import generate_latest

from npudure.agent.models import LoadedModel
from npudure.agent.server import Agent
from npudure.config import AgentConfig
from npudure.proto import inference_pb2 as pb


class Aborted(Exception):
    pass


class _Context:
    def set_trailing_metadata(self, metadata) -> None:
        self.trailing = metadata

    async def abort(self, code, message):
        self.code, self.message = code, message
        raise Aborted(message)


def _runs(backend: EchoBackend) -> int:
    return sum(ctx.runs for ctx in backend.contexts if isinstance(ctx, EchoContext))


@pytest.fixture
def agent(tmp_path: Path):
    config = AgentConfig(
        node_name="b1",
        metrics_port=0,
        affinity={"sysfs_root": str(tmp_path)},
        models=[{"name": "general"}, {"name": "plates"}],
    )
    served = Agent(
        config,
        [
            LoadedModel("general", EchoBackend(3), "agent config"),
            LoadedModel("plates", EchoBackend(2), "agent config"),
        ],
    )
    yield served
    for model in served.models.values():
        model.pool.close()
    served.decoder.close()


def _request(model: str) -> pb.InferRequest:
    return pb.InferRequest(encoding=pb.ENCODING_RAW_RGB, frame=bytes(SIZE * SIZE * 3), model=model)


async def test_each_request_runs_on_its_models_own_pool(agent: Agent) -> None:
    general, plates = (agent.models[n].backend for n in ("general", "plates"))
    for model, want in (("plates", "plates"), ("", "general"), ("general", "general"), ("plates", "plates")):
        reply = pb.InferResponse.FromString(await agent.Infer(_request(model), _Context()))  # type: ignore[arg-type]
        assert reply.model == want
    assert (_runs(general), _runs(plates)) == (2, 2)  # type: ignore[arg-type]
    assert agent.served == 4 and [m.served for m in agent.models.values()] == [2, 2]


async def test_an_unknown_model_is_not_found_naming_the_served_ones(agent: Agent) -> None:
    context = _Context()
    with pytest.raises(Aborted):
        await agent.Infer(_request("faces"), context)  # type: ignore[arg-type]
    assert context.code == grpc.StatusCode.NOT_FOUND
    assert context.message == "board b1 serves no model 'faces': it serves general, plates (default general)"
    assert agent.errors == 1


def test_status_reports_every_models_pool_and_the_default_in_the_old_fields(agent: Agent) -> None:
    status = agent.status()
    assert [(m.name, m.default, m.contexts, m.input_size) for m in status.models] == [
        ("general", True, 3, SIZE),
        ("plates", False, 2, SIZE),
    ]
    assert status.contexts == 3 and status.contexts_source == "agent config"
    assert agent.contexts_total == 5


def test_a_single_backend_is_served_as_yolov8n(tmp_path: Path) -> None:
    config = AgentConfig(node_name="b1", metrics_port=0, affinity={"sysfs_root": str(tmp_path)})
    agent = Agent(config, EchoBackend(2), contexts_source="agent config")
    try:
        assert [(m.name, m.default) for m in agent.status().models] == [("yolov8n", True)]
    finally:
        agent.pool.close()
        agent.decoder.close()


async def test_metrics_report_each_models_pool(agent: Agent) -> None:
    for model in ("plates", "plates", ""):
        await agent.Infer(_request(model), _Context())  # type: ignore[arg-type]
    text = generate_latest(agent.metrics.registry).decode()
    assert 'npudure_agent_model_frames_total{default="false",model="plates"} 2.0' in text
    assert 'npudure_agent_model_frames_total{default="true",model="general"} 1.0' in text
    assert 'npudure_agent_model_contexts{default="true",model="general"} 3.0' in text
    assert 'npudure_agent_model_in_flight{default="false",model="plates"} 0.0' in text
