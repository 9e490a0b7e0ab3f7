"""Frigate's labelmap from a model's own names: the .rknn record, ONNX metadata, COCO-80 without a model;
a model that names no classes is refused in one line."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from npudure_workshop.model import cli
from npudure_workshop.model.labelmap import LabelmapError, names_of, render


def _onnx(path: Path, names: str | None) -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "g",
        [x],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    model = helper.make_model(graph)
    if names is not None:
        model.metadata_props.add(key="names", value=names)
    onnx.save(model, str(path))
    return path


def test_without_a_model_it_is_coco_80_as_frigates_own_file() -> None:
    text = render(names_of(None))
    lines = text.splitlines()
    assert len(lines) == 80 and lines[0] == "0  person" and lines[79] == "79  toothbrush"


def test_an_onnx_export_gives_its_names_metadata(tmp_path: Path) -> None:
    model = _onnx(tmp_path / "fall.onnx", "{0: 'Normal', 1: 'Fall'}")
    assert render(names_of(model)) == "0  Normal\n1  Fall\n"


def test_an_rknn_gives_the_names_of_its_record(tmp_path: Path) -> None:
    model = tmp_path / "fall-rk3588.rknn"
    model.write_bytes(b"RKNN")
    (tmp_path / "fall-rk3588.rknn.json").write_text(
        json.dumps({"num_classes": 2, "names": ["Normal", "Fall"]})
    )
    assert names_of(model) == ("Normal", "Fall")


@pytest.mark.parametrize(
    ("name", "content", "words"),
    [
        ("plain.onnx", None, "names no classes"),
        ("absent.onnx", "absent", "no such file"),
        ("garbage.onnx", b"not a model", "not a readable ONNX model"),
        ("model.tflite", b"x", "not a .rknn or .onnx"),
    ],
)
def test_a_model_without_names_is_refused_in_one_line(tmp_path: Path, name: str, content, words: str) -> None:
    path = tmp_path / name
    if content is None:
        _onnx(path, None)
    elif isinstance(content, bytes):
        path.write_bytes(content)
    with pytest.raises(LabelmapError) as caught:
        names_of(path)
    assert words in str(caught.value) and "\n" not in str(caught.value)


def test_the_command_writes_the_file_and_exits_65_on_a_bad_model(tmp_path: Path, capsys) -> None:
    out = tmp_path / "labelmap.txt"
    assert cli.run(argparse.Namespace(model_command="labelmap", model=None, out=out)) == 0
    assert out.read_text().startswith("0  person\n")
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"x")
    assert cli.run(argparse.Namespace(model_command="labelmap", model=bad, out=None)) == 65
    assert capsys.readouterr().err.count("\n") == 1
