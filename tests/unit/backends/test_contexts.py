"""How many contexts ``contexts: auto`` means, and the source phrase that says why."""

from __future__ import annotations

from pathlib import Path

import pytest

from npudure.backends import BackendError
from npudure.backends import contexts as ctx
from npudure.board import soc
from npudure.config import AgentConfig


def _soc(name: str) -> soc.Soc:
    return soc.Soc(name, soc.NPU_CORES.get(name), "test") if name else soc.Soc("", None, "test")


def _config(**fields: object) -> AgentConfig:
    return AgentConfig.model_validate({"node_name": "b", **fields})


@pytest.mark.parametrize(
    ("board", "count", "source", "provisional"),
    [
        ("rk3576", 8, "RK3576 default, measured", False),
        ("rk3588", 9, "RK3588 default, provisional: not measured", True),
        ("rk3588s", 9, "RK3588 default, provisional: not measured", True),
        ("", 8, "SoC not recognised: the RK3576's 8, provisional: not measured", True),
    ],
)
def test_rknn_auto_takes_the_socs_default(board: str, count: int, source: str, provisional: bool) -> None:
    found = ctx.resolve(_config(backend="rknn", model="/m/x.rknn"), _soc(board))
    assert (found.count, found.source, found.provisional) == (count, source, provisional)


def test_the_config_wins_then_the_record_then_the_default(tmp_path: Path) -> None:
    model = tmp_path / "yolo.rknn"
    assert ctx.resolve(
        _config(backend="rknn", model=str(model), contexts=3), _soc("rk3576")
    ) == ctx.ContextCount(3, "agent config")
    (tmp_path / "yolo.rknn.json").write_text('{"input_size": 640}')  # a record without the key
    assert ctx.resolve(_config(backend="rknn", model=str(model)), _soc("rk3576")).count == 8
    (tmp_path / "yolo.rknn.json").write_text('{"input_size": 640, "contexts": 12}')
    found = ctx.resolve(_config(backend="rknn", model=str(model)), _soc("rk3576"))
    assert found == ctx.ContextCount(12, "recorded beside the model (yolo.rknn.json)")
    assert ctx.resolve(_config(backend="rknn", model=str(model), contexts=2), _soc("rk3576")).count == 2


def test_onnx_keeps_npu_cores_sessions_and_sim_emulates_an_rk3576() -> None:
    onnx = ctx.resolve(_config(backend="onnx", model="/m/x.onnx", npu_cores=3), _soc("rk3588"))
    assert (onnx.count, onnx.source) == (3, "onnx: one CPU session per npu_cores")
    sim = ctx.resolve(_config(backend="sim", npu_cores=2), _soc("rk3588"))
    assert sim.count == 8 and "measured on the RK3576" in sim.source and not sim.provisional


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('{"contexts": 0}', "contexts is 0, not a whole number from 1 to 64"),
        ('{"contexts": "eight"}', "contexts is 'eight'"),
        ('{"contexts": true}', "contexts is True"),
        ("{not json", "is not readable JSON"),
    ],
)
def test_a_bad_record_is_named(tmp_path: Path, text: str, fragment: str) -> None:
    model = tmp_path / "yolo.rknn"
    (tmp_path / "yolo.rknn.json").write_text(text)
    with pytest.raises(BackendError, match=r"yolo\.rknn\.json") as info:
        ctx.resolve(_config(backend="rknn", model=str(model)), _soc("rk3576"))
    assert fragment in str(info.value)
