"""One frame module (#12): the input size is defined once, in npudure/vision/frames.py; backends trust
the array."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
from helpers.agent_frames import decode_as_the_agent

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

    from npudure_workshop.bench.payloads import fit_640

    wide = Image.fromarray(np.full((300, 900, 3), 90, np.uint8))
    fitted = fit_640(wide)
    made = frames.synthetic_frame(7)
    for frame in (fitted, made):
        assert decode_as_the_agent(pb.ENCODING_RAW_RGB, frame.tobytes()).shape == frame.shape


def test_one_frame_api_one_letterbox_drawer() -> None:
    """The 640-only generation (check_request, decode, decode_checked, fit) is gone: the agent's
    check_request_for and decode_for_model are the API; one function draws a letterbox."""
    for gone in ("check_request", "decode", "decode_checked", "fit"):
        assert not hasattr(frames, gone), gone
    source = (PACKAGE / "vision" / "frames.py").read_text()
    assert source.count("Image.new(") == 0  # no PIL canvas: the numpy padding (_pad) is the drawer
    assert source.count(".resize(") == 1  # in _letterboxed, and nowhere else
