"""`npudure model convert` refuses a graph that is not a YOLOv8 head in one line (moved from tests/unit: it
starts `npudure`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper


def _single_output_graph(path: Path) -> Path:
    """One output [1, 6, 8400] made by an Identity: the right shape, but no YOLOv8 head."""
    x = helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, 640, 640])
    y = helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, 6, 8400])
    shape = onnx.numpy_helper.from_array(np.array([1, 6, 8400], np.int64), "shape")
    cut = onnx.numpy_helper.from_array(np.array([0], np.int64), "zero")
    nodes = [
        helper.make_node("Flatten", ["images"], ["flat"], name="flatten"),
        helper.make_node(
            "Slice",
            ["flat", "zero", helper.make_tensor("end", TensorProto.INT64, [1], [50400]).name, "one"],
            ["part"],
            name="slice",
        ),
        helper.make_node("Reshape", ["part", "shape"], ["output0"], name="not_a_head"),
    ]
    end = onnx.numpy_helper.from_array(np.array([50400], np.int64), "end")
    one = onnx.numpy_helper.from_array(np.array([1], np.int64), "one")
    graph = helper.make_graph(nodes, "g", [x], [y], [shape, cut, end, one])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return path


def test_cli_refuses_a_graph_that_is_not_a_head_in_one_line(tmp_path: Path) -> None:
    bad = _single_output_graph(tmp_path / "bad.onnx")
    proc = subprocess.run(
        [sys.executable, "-m", "npudure", "model", "convert", "--platform", "rk3588", str(bad)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 65 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "not a YOLOv8 detection head" in lines[0] and "'not_a_head'" in lines[0]
