"""A standard ultralytics export (one output (1, 4+nc, N)) rewritten into the zoo split layout on the
ONNX graph: at nc = 1, 2, 80 and inputs 320, 640 the rewritten graph decodes to the same detections
as the export's own single output; a graph that is not a YOLOv8 head is refused naming the node."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
import onnx
from helpers.onnx_graphs import single_output_graph

from npudure.vision.frames import synthetic_frame
from npudure.vision.labels import COCO80, parse_names
from npudure.vision.postprocess import detect_layout, postprocess
from npudure_workshop.model.build import default_names, ensure_model
from npudure_workshop.model.convert import ConvertError, inspect_source
from npudure_workshop.model.rewrite import RewriteError, find_head, to_zoo_layout
from npudure_workshop.model.simcheck import match_detections, onnx_outputs

CASES = [(nc, size) for nc in (1, 2, 80) for size in (320, 640)]


@pytest.fixture(scope="module")
def standard(model_cache):
    return {case: ensure_model("standard", nc=case[0], size=case[1]) for case in CASES}


@pytest.mark.parametrize(("nc", "size"), CASES)
def test_standard_export_rewrites_to_the_zoo_layout(standard, nc: int, size: int, tmp_path: Path) -> None:
    built = standard[(nc, size)]
    model = onnx.load(str(built.path))
    meta = {p.key: p.value for p in model.metadata_props}
    assert parse_names(meta["names"]) == default_names(nc) and meta["imgsz"] == f"[{size}, {size}]"
    assert [d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim] == [
        1,
        4 + nc,
        sum((size // s) ** 2 for s in (8, 16, 32)),
    ]

    rewritten, head = to_zoo_layout(model)
    assert (head.num_classes, head.input_size) == (nc, size)
    assert [s for _, _, s in head.levels] == [8, 16, 32]
    shapes = [[d.dim_value for d in o.type.tensor_type.shape.dim] for o in rewritten.graph.output]
    want = []
    for s in (8, 16, 32):
        hw = size // s
        want += [[1, 64, hw, hw], [1, nc, hw, hw]]  # no score sum (ADR 19)
    assert shapes == want and detect_layout(shapes) == "zoo"
    # The DFL decode (the only Softmax) and the head's tail (Split, dist2bbox, Concat) are gone.
    assert "Softmax" not in {n.op_type for n in rewritten.graph.node}
    assert not [n.name for n in rewritten.graph.node if n.name.startswith("model.22/")]
    assert {p.key: p.value for p in rewritten.metadata_props}["names"] == meta["names"]

    path = tmp_path / "zoo.onnx"
    onnx.save(rewritten, str(path))
    frames = np.stack([synthetic_frame(40, size)])
    matched = total = 0
    for ref, got in zip(onnx_outputs(built.path, frames), onnx_outputs(path, frames), strict=True):
        a, b = postprocess(ref, input_size=size), postprocess(got, input_size=size)
        assert len(a) == len(b)
        np.testing.assert_allclose(a, b, atol=1e-3)
        matched += match_detections(a, b)
        total += len(a)
    assert total > 0 and matched == total


def test_converter_reads_class_count_size_and_names(standard) -> None:
    src = inspect_source(standard[(2, 320)].path)
    assert (src.layout, src.num_classes, src.input_size, src.names) == (
        "standard",
        2,
        320,
        ("class0", "class1"),
    )
    src = inspect_source(standard[(80, 640)].path)
    assert (src.layout, src.num_classes, src.names) == ("standard", 80, COCO80)


def test_a_graph_that_is_not_a_head_names_the_node(tmp_path: Path, standard) -> None:
    bad = single_output_graph(tmp_path / "bad.onnx")
    with pytest.raises(
        RewriteError,
        match=r"expected the box/class Concat \(Concat axis=1\) producing 'output0', "
        r"found Reshape node 'not_a_head'",
    ):
        find_head(onnx.load(str(bad)))
    with pytest.raises(ConvertError) as info:
        inspect_source(bad)
    assert info.value.code == 65
    # A real head with one node changed: the class scores' Sigmoid replaced.
    model = onnx.load(str(standard[(2, 320)].path))
    for node in model.graph.node:
        if node.op_type == "Sigmoid" and node.name == "model.22/Sigmoid":
            node.op_type = "Relu"
    with pytest.raises(
        RewriteError, match=r"expected the class scores' Sigmoid .* found Relu node 'model.22/Sigmoid'"
    ):
        find_head(model)
