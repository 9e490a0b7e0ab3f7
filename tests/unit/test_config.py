from pathlib import Path

import pytest

from npudure import config as cfg


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "agent.yml"
    path.write_text(text)
    return path


def test_valid_agent_config_defaults(tmp_path: Path) -> None:
    conf = cfg.load(cfg.AgentConfig, write(tmp_path, "node_name: board1\n"))
    assert conf.backend == "sim"
    assert conf.listen == "0.0.0.0:50051"
    assert conf.postprocess.score_threshold == 0.25
    assert conf.postprocess.iou_threshold == 0.45
    assert (conf.contexts, conf.core_mask) == ("auto", "auto")


@pytest.mark.parametrize(
    ("text", "contexts", "mask"), [("1", 1, "auto"), ("64", 64, "all"), ("auto", "auto", "per_core")]
)
def test_contexts_and_core_mask_are_read(tmp_path: Path, text: str, contexts: object, mask: str) -> None:
    conf = cfg.load(cfg.AgentConfig, write(tmp_path, f"node_name: b1\ncontexts: {text}\ncore_mask: {mask}\n"))
    assert (conf.contexts, conf.core_mask) == (contexts, mask)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("node_name: b1\nbackend: rknnn\n", ["backend", "'rknnn' is not allowed", "rknn", "onnx", "sim"]),
        ("node_name: b1\nsim:\n  time_scal: 2\n", ["sim.time_scal", "unknown field"]),
        ("node_name: b1\nlisten: nope\n", ["listen", "host:port"]),
        ("backend: sim\n", ["node_name", "required"]),
        ("node_name: b1\nnpu_cores: 0\n", ["npu_cores", "greater than or equal to 1"]),
        ("node_name: b1\ncontexts: 0\n", ["contexts", "from 1 to 64, or auto", "got 0"]),
        ("node_name: b1\ncontexts: 65\n", ["contexts", "from 1 to 64, or auto"]),
        ("node_name: b1\ncontexts: automatic\n", ["contexts", "or auto", "'automatic'"]),
        ("node_name: b1\ncontexts: true\n", ["contexts", "or auto"]),
        ("node_name: b1\ncontexts: 2.5\n", ["contexts", "or auto"]),
        ("node_name: b1\ncore_mask: core0\n", ["core_mask", "'core0' is not allowed", "per_core"]),
        ("- a\n- b\n", ["mapping"]),
        ("node_name: [b1\n", ["not valid YAML"]),
    ],
)
def test_agent_config_errors_name_file_field_and_allowed(
    tmp_path: Path, text: str, expected: list[str]
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(cfg.ConfigError) as err:
        cfg.load(cfg.AgentConfig, path)
    message = str(err.value)
    assert str(path) in message
    for fragment in expected:
        assert fragment in message


def test_missing_file_is_clear(tmp_path: Path) -> None:
    with pytest.raises(cfg.ConfigError, match="config file not found"):
        cfg.load(cfg.AgentConfig, tmp_path / "nope.yml")


def test_scheduler_config_needs_boards_and_unique_names(tmp_path: Path) -> None:
    with pytest.raises(cfg.ConfigError, match="boards"):
        cfg.parse(cfg.SchedulerConfig, {}, "s.yml")
    boards = [{"name": "a", "address": "h:1"}, {"name": "a", "address": "h:2"}]
    with pytest.raises(cfg.ConfigError, match="appears twice"):
        cfg.parse(cfg.SchedulerConfig, {"boards": boards}, "s.yml")
    with pytest.raises(cfg.ConfigError, match="policy"):
        cfg.parse(cfg.SchedulerConfig, {"boards": boards[:1], "policy": "fastest"}, "s.yml")
    ok = cfg.parse(cfg.SchedulerConfig, {"boards": boards[:1]}, "s.yml")
    assert ok.connections_per_board == 2


def test_zmq_model_endpoints_need_ports_of_their_own() -> None:
    assert cfg.ZmqApiConfig(port=5555, models={"plates": 5556}).models == {"plates": 5556}
    with pytest.raises(cfg.ValidationError, match="a port of its own"):
        cfg.ZmqApiConfig(port=5555, models={"plates": 5555})
    with pytest.raises(cfg.ValidationError, match="a port of its own"):
        cfg.ZmqApiConfig(port=5555, models={"plates": 5556, "faces": 5556})
