"""One frame module (#12): the input size is defined once, in npudure/vision/frames.py; backends trust
the array."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np

from npudure.proto import inference_pb2 as pb
from npudure.vision import frames

PACKAGE = Path(__file__).resolve().parents[3] / "npudure"


def assignments(name: str) -> list[str]:
    found = []
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else []
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                found.append(str(path.relative_to(PACKAGE)))
    return found


def test_the_input_size_is_defined_once() -> None:
    for name in ("INPUT_SIZE", "FRAME_SHAPE", "FRAME_BYTES", "FRAME_SIZE"):
        assert assignments(name) in ([], ["vision/frames.py"]), (name, assignments(name))
    assert assignments("INPUT_SIZE") == ["vision/frames.py"]


def test_no_backend_imports_another_for_a_frame_check() -> None:
    rknn = ast.parse((PACKAGE / "backends" / "rknn.py").read_text())
    imported = {n.module for n in ast.walk(rknn) if isinstance(n, ast.ImportFrom)}
    assert "npudure.backends.onnx" not in imported
    assert not (PACKAGE / "model" / "frames.py").exists()


def test_frame_makers_fit_the_decoder() -> None:
    from PIL import Image

    wide = Image.fromarray(np.full((300, 900, 3), 90, np.uint8))
    fitted = frames.fit(wide)
    made = frames.synthetic_frame(7)
    for frame in (fitted, made):
        assert frames.decode(pb.ENCODING_RAW_RGB, frame.tobytes()).shape == frame.shape
