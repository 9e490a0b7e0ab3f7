"""`npudure model check`: the agent's own rules for a model file, applied on the controller before a
deploy: a YOLOv8 export at any size and class count passes with its names; a file that is no model, a
classifier, a dynamic input, a size the boards' config contradicts, and names that do not fit are each
refused in one line (exit 65)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from helpers.onnx_graphs import declared_onnx

from npudure_workshop.model import cli
from npudure_workshop.model.check import ModelCheckError, check_model


def test_a_users_export_passes_with_its_size_and_names(tmp_path: Path) -> None:
    model = declared_onnx(
        tmp_path / "best.onnx", [1, 3, 320, 320], [[1, 7, 2100]], "{0: 'cat', 1: 'dog', 2: 'plate'}"
    )
    checked = check_model(model)
    assert (checked.size, checked.classes, checked.names, checked.layout) == (
        320,
        3,
        ("cat", "dog", "plate"),
        "concat",
    )
    assert checked.line().endswith("YOLOv8 (concat outputs), 320x320 input, 3 classes (cat, dog, plate)")
    assert check_model(model, input_size=320).size == 320


@pytest.mark.parametrize(
    ("image", "outputs", "names", "input_size", "words"),
    [
        (
            [1, 3, 320, 320],
            [[1, 7, 2100]],
            None,
            640,
            "takes 320x320 frames but the agent config says input_size 640",
        ),
        (
            [1, 3, 224, 224],
            [[1, 1000]],
            None,
            None,
            "is not a YOLOv8 detection export: cannot read YOLOv8 outputs",
        ),
        ([1, 3, "h", "w"], [[1, 7, 2100]], None, None, "with a fixed square imgsz"),
        ([1, 3, 320, 320], [[1, 7, 2100]], "{0: 'cat'}", None, "names 1 classes but the model has 3"),
    ],
)
def test_a_model_the_boards_would_refuse_is_named(
    tmp_path: Path, image: list, outputs: list, names: str | None, input_size: int | None, words: str
) -> None:
    model = declared_onnx(tmp_path / "m.onnx", image, outputs, names)
    with pytest.raises(ModelCheckError, match=words):
        check_model(model, input_size)


def test_not_a_model_and_no_file_are_named(tmp_path: Path) -> None:
    (tmp_path / "garbage.onnx").write_bytes(b"not a model")
    with pytest.raises(ModelCheckError, match="not a readable ONNX model"):
        check_model(tmp_path / "garbage.onnx")
    with pytest.raises(ModelCheckError, match="no such file"):
        check_model(tmp_path / "absent.onnx")
    (tmp_path / "m.tflite").write_bytes(b"x")
    with pytest.raises(ModelCheckError, match=r"not an \.onnx or \.rknn file"):
        check_model(tmp_path / "m.tflite")


def test_an_rknn_is_checked_by_its_record(tmp_path: Path) -> None:
    model = tmp_path / "fall-rk3588.rknn"
    model.write_bytes(b"RKNN")
    (tmp_path / "fall-rk3588.rknn.json").write_text(
        json.dumps({"num_classes": 2, "names": ["Normal", "Fall"], "input_size": 416})
    )
    assert check_model(model).names == ("Normal", "Fall") and check_model(model).size == 416
    with pytest.raises(ModelCheckError, match=r"takes 416x416 frames .* says input_size 640"):
        check_model(model, 640)


def test_the_command_prints_one_line_and_exits_65(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = declared_onnx(tmp_path / "best.onnx", [1, 3, 320, 320], [[1, 7, 2100]], "{0: 'a', 1: 'b', 2: 'c'}")
    args = argparse.Namespace(model_command="check", model=good, input_size=None, json=False)
    assert cli.run(args) == 0
    assert capsys.readouterr().out.count("\n") == 1
    args.json = True
    assert cli.run(args) == 0
    assert json.loads(capsys.readouterr().out) == {
        "path": str(good),
        "input_size": 320,
        "classes": 3,
        "names": ["a", "b", "c"],
    }
    args.input_size = 640
    assert cli.run(args) == 65
    err = capsys.readouterr().err
    assert err.startswith("npudure model check: ") and err.count("\n") == 1 and "Traceback" not in err
