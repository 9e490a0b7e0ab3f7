"""``--record MODEL``: the operating point under ``contexts`` in MODEL.json, every other key kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from npudure_workshop.bench.contexts_record import RecordError, check_recordable, record_path, write_contexts


def test_the_record_keeps_its_keys_and_gains_contexts(tmp_path: Path) -> None:
    model = tmp_path / "yolo.rknn"
    model.write_bytes(b"rknn")
    record_path(model).write_text(json.dumps({"names": ["person"], "input_size": 640, "contexts": 4}))
    path = write_contexts(model, 8, {"by": "npudure bench contexts"})
    assert path == tmp_path / "yolo.rknn.json"
    record = json.loads(path.read_text())
    assert record == {
        "names": ["person"],
        "input_size": 640,
        "contexts": 8,
        "contexts_measured": {"by": "npudure bench contexts"},
    }


def test_a_model_without_a_record_gets_one(tmp_path: Path) -> None:
    model = tmp_path / "m.onnx"
    model.write_bytes(b"onnx")
    check_recordable(model)
    write_contexts(model, 2, {})
    assert json.loads(record_path(model).read_text())["contexts"] == 2


def test_what_cannot_be_recorded_is_refused_before_measuring(tmp_path: Path) -> None:
    with pytest.raises(RecordError, match="no such model file"):
        check_recordable(tmp_path / "missing.rknn")
    model = tmp_path / "m.rknn"
    model.write_bytes(b"rknn")
    record_path(model).write_text("{not json")
    with pytest.raises(RecordError, match="cannot read it as JSON"):
        check_recordable(model)
    record_path(model).write_text("[1, 2]")
    with pytest.raises(RecordError, match="not a JSON object"):
        check_recordable(model)


def test_an_agent_with_contexts_auto_takes_the_recorded_count(tmp_path: Path) -> None:
    from npudure.backends.contexts import recorded
    from npudure.config import AgentConfig

    model = tmp_path / "m.onnx"
    model.write_bytes(b"onnx")
    write_contexts(model, 6, {"by": "npudure bench contexts"})
    found = recorded(AgentConfig(node_name="b1", backend="onnx", model=str(model)))
    assert found is not None and found.count == 6
