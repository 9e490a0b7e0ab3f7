"""Backends read the input size and the class names from the model, never assume 640 / COCO."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from npudure.backends import BackendError, create_backend
from npudure.backends.rknn import model_record
from npudure.config import AgentConfig
from npudure.vision.frames import synthetic_frame
from npudure.vision.labels import COCO80
from npudure_workshop.model.build import ensure_model

NAMES = ("forklift", "pallet")


def _config(model: str, **kw) -> AgentConfig:
    return AgentConfig(node_name="t", backend="onnx", model=model, npu_cores=1, **kw)


@pytest.fixture(scope="module")
def two_class_320(model_cache):
    return ensure_model("standard", nc=2, size=320, names=NAMES)


def test_standard_export_gives_its_size_and_names(two_class_320) -> None:
    backend = create_backend(_config(str(two_class_320.path)))
    try:
        assert backend.input_size == 320
        assert backend.class_names == NAMES
        dets = backend.contexts[0].run(synthetic_frame(3, 320)).detections
        assert len(dets) > 0
        assert dets[:, :4].max() <= 320 and set(np.unique(dets[:, 5])) <= {0.0, 1.0}
    finally:
        backend.close()


def test_the_project_model_is_coco_at_640(model_cache) -> None:
    backend = create_backend(_config(str(ensure_model("split").path)))
    try:
        assert backend.input_size == 640 and backend.class_names == COCO80
    finally:
        backend.close()


def test_config_names_must_fit_the_model(two_class_320) -> None:
    with pytest.raises(BackendError, match="names 3 classes but the model has 2"):
        create_backend(_config(str(two_class_320.path), class_names=["a", "b", "c"]))
    with pytest.raises(BackendError, match="takes 320x320 frames but the agent config says input_size 640"):
        create_backend(_config(str(two_class_320.path), input_size=640))
    backend = create_backend(_config(str(two_class_320.path), class_names=["a", "b"]))
    assert backend.class_names == ("a", "b")
    backend.close()


def test_rknn_record_beside_the_model(tmp_path) -> None:
    rknn = tmp_path / "m.rknn"
    rknn.write_bytes(b"RKNN")
    cfg = AgentConfig(node_name="t", backend="rknn", model=str(rknn))
    assert model_record(rknn, cfg) == (640, COCO80)  # npudure's own model: no record
    (tmp_path / "m.rknn.json").write_text(json.dumps({"input_size": 320, "num_classes": 2, "names": NAMES}))
    assert model_record(rknn, cfg) == (320, NAMES)
    override = AgentConfig(
        node_name="t", backend="rknn", model=str(rknn), class_names=["x", "y"], input_size=416
    )
    assert model_record(rknn, override) == (416, ("x", "y"))
    (tmp_path / "m.rknn.json").write_text(json.dumps({"input_size": 320, "num_classes": 3, "names": NAMES}))
    with pytest.raises(BackendError, match="names 2 classes but the model has 3"):
        model_record(rknn, cfg)
