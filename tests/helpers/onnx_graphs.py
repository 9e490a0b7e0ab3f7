"""Small ONNX graphs: for the converter's refusals (the right output shape, the wrong graph), and graphs that
only declare shapes, for `npudure model check` and the agent role's preflight (which read, never run)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper


def single_output_graph(path: Path) -> Path:
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


def declared_onnx(path: Path, image: list, outputs: list[list[int]], names: str | None = None) -> Path:
    """An ONNX file at ``path`` with one input of shape ``image`` and these output shapes (and the
    ``names`` metadata ultralytics writes, when given)."""
    x = helper.make_tensor_value_info("images", TensorProto.FLOAT, image)
    nodes, outs = [], []
    for i, shape in enumerate(outputs):
        value = helper.make_tensor(f"c{i}", TensorProto.FLOAT, [1], [0.0])
        nodes.append(helper.make_node("Constant", [], [f"out{i}"], value=value))
        outs.append(helper.make_tensor_value_info(f"out{i}", TensorProto.FLOAT, shape))
    model = helper.make_model(helper.make_graph(nodes, "g", [x], outs))
    if names is not None:
        model.metadata_props.add(key="names", value=names)
    onnx.save(model, str(path))
    return path
