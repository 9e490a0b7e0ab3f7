"""The board's model set: the config's ``models:`` (or its single ``model:``), the default, the whole
set's memory, and a request's model chosen by name (npudure.agent.models). No backend is loaded."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.echo_contexts import EchoBackend
from pydantic import ValidationError

from npudure.agent import models
from npudure.backends import BackendError, memory
from npudure.config import DEFAULT_MODEL_NAME, AgentConfig


def _config(**fields: object) -> AgentConfig:
    return AgentConfig(node_name="b1", **fields)


def test_a_single_model_is_one_entry_named_yolov8n_whatever_its_file() -> None:
    config = _config(backend="onnx", model="/m/plates-v2.onnx", input_size=320)
    [entry] = models.entries(config)
    assert (entry.name, entry.model, entry.input_size, entry.default) == (
        DEFAULT_MODEL_NAME,
        "/m/plates-v2.onnx",
        320,
        True,
    )
    assert models.model_config(config, entry) is config  # read exactly as before


def test_the_marked_default_comes_first_else_the_first_listed() -> None:
    listed = [{"name": "a"}, {"name": "b", "default": True}, {"name": "c"}]
    assert [e.name for e in models.entries(_config(models=listed))] == ["b", "a", "c"]
    assert [e.name for e in models.entries(_config(models=listed[:1] + listed[2:]))] == ["a", "c"]


def test_each_model_gets_its_own_file_names_and_contexts() -> None:
    config = _config(
        backend="onnx",
        contexts=3,
        models=[{"name": "a", "model": "/m/a.onnx", "contexts": 1}, {"name": "b", "model": "/m/b.onnx"}],
    )
    a, b = (models.model_config(config, e) for e in models.entries(config))
    assert (a.model, a.contexts, a.models) == ("/m/a.onnx", 1, None)
    assert (b.model, b.contexts) == ("/m/b.onnx", 3)  # the agent's contexts unless the model sets its own


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"model": "/m/a.onnx", "models": [{"name": "a"}]}, "set either models or model"),
        ({"models": [{"name": "a"}, {"name": "a"}]}, "a listed twice"),
        ({"models": [{"name": "a", "default": True}, {"name": "b", "default": True}]}, "more than one"),
        ({"models": [{"name": "no spaces"}]}, "pattern"),
        ({"models": [{"name": "a", "contexts": 0}]}, "contexts is a whole number"),
    ],
)
def test_bad_model_sets_are_refused(fields: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        _config(**fields)


def test_the_whole_sets_memory_is_checked_naming_each_share(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 100000 kB\nMemAvailable: 50000 kB\n")  # ~48 MiB
    sim = _config(backend="sim")
    # 8 + 8 contexts of the sim's stated 4 MiB: each fits alone (32 MiB), not together (64 MiB).
    with pytest.raises(
        memory.ContextMemoryError, match=r"general 8 x 4 MiB, plates 8 x 4 MiB.*MemAvailable is 49 MiB"
    ):
        models.check_memory([("general", sim, 8), ("plates", sim, 8)], str(meminfo))
    models.check_memory([("general", sim, 8), ("plates", sim, 2)], str(meminfo))
    models.check_memory([("general", sim, 8)], str(meminfo))  # one model: the backend's own check


def test_a_request_names_its_model_or_gets_the_default() -> None:
    served = {"general": "G", "plates": "P"}
    assert models.choose(served, "general", "", "b1") == "G"  # type: ignore[arg-type]
    assert models.choose(served, "general", "plates", "b1") == "P"  # type: ignore[arg-type]
    with pytest.raises(models.UnknownModel) as err:
        models.choose(served, "general", "faces", "b1")  # type: ignore[arg-type]
    assert str(err.value) == "board b1 serves no model 'faces': it serves general, plates (default general)"


class ClosingEcho(EchoBackend):
    closed = False

    def close(self) -> None:
        self.closed = True


def test_a_model_that_cannot_load_is_named_and_the_loaded_ones_are_closed() -> None:
    made: list[ClosingEcho] = []

    def create(config: AgentConfig, count: int) -> ClosingEcho:
        if config.model == "/m/plates.onnx":
            raise BackendError("model file /m/plates.onnx does not exist")
        made.append(ClosingEcho(count))
        return made[-1]

    config = _config(
        backend="onnx",
        contexts=2,
        models=[{"name": "general", "model": "/m/g.onnx"}, {"name": "plates", "model": "/m/plates.onnx"}],
    )
    with pytest.raises(BackendError, match=r"^model plates: model file /m/plates.onnx does not exist$"):
        models.load(config, create=create)
    assert len(made) == 1 and made[0].closed
