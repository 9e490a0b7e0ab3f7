"""The onnx backend on the real-size YOLOv8n: detections, contexts, and clear errors."""

from __future__ import annotations

import sys

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from npudure.backends import BackendError, create_backend, memory
from npudure.backends.onnx import OnnxBackend
from npudure.config import AgentConfig, PostprocessConfig
from npudure.vision.frames import synthetic_frame
from npudure_workshop.model.build import ensure_model


@pytest.fixture(scope="module")
def model(model_cache):
    return ensure_model("split")


def _config(model: str, **kw) -> AgentConfig:
    return AgentConfig(node_name="t", backend="onnx", model=model, **kw)


@pytest.fixture(scope="module")
def backend(model):
    backend = create_backend(_config(str(model.path), npu_cores=2, model_sha256=model.sha256))
    yield backend
    backend.close()


def test_detections_on_a_seeded_frame(backend, model) -> None:
    assert isinstance(backend, OnnxBackend) and not backend.emulated
    assert len(backend.contexts) == 2
    assert backend.runtime_version.startswith("onnxruntime ")
    assert backend.model_sha256 == model.sha256
    result = backend.contexts[0].run(synthetic_frame(0))
    dets = result.detections
    assert dets.dtype == np.float32 and dets.ndim == 2 and dets.shape[1] == 6
    assert len(dets) > 0
    assert dets[:, :4].min() >= 0 and dets[:, :4].max() <= 640
    assert np.all(dets[:, 2] >= dets[:, 0]) and np.all(dets[:, 3] >= dets[:, 1])
    assert dets[:, 4].min() >= 0.25 and np.all(np.diff(dets[:, 4]) <= 0)
    assert np.all((dets[:, 5] >= 0) & (dets[:, 5] < 80) & (dets[:, 5] == np.round(dets[:, 5])))
    assert result.preprocess_s > 0 and result.inference_s > 0 and result.postprocess_s > 0


def test_contexts_agree_and_frames_differ(backend) -> None:
    frame = synthetic_frame(1)
    a = backend.contexts[0].run(frame).detections
    b = backend.contexts[1].run(frame).detections
    np.testing.assert_array_equal(a, b)
    c = backend.contexts[0].run(synthetic_frame(2)).detections
    assert len(c) > 0 and (a.shape != c.shape or not np.allclose(a, c))


def test_postprocess_settings_are_applied(model) -> None:
    pp = PostprocessConfig(score_threshold=0.5, iou_threshold=0.3, max_detections=3)
    backend = OnnxBackend(_config(str(model.path), npu_cores=1, postprocess=pp))
    try:
        dets = backend.contexts[0].run(synthetic_frame(0)).detections
        assert len(dets) <= 3 and (len(dets) == 0 or dets[:, 4].min() >= 0.5)
    finally:
        backend.close()


def test_zoo_layout_model_gives_the_same_detections(backend, model_cache) -> None:
    zoo = ensure_model("zoo")
    other = OnnxBackend(_config(str(zoo.path), npu_cores=1))
    try:
        frame = synthetic_frame(0)
        np.testing.assert_allclose(
            other.contexts[0].run(frame).detections, backend.contexts[0].run(frame).detections, atol=0.05
        )
    finally:
        other.close()


def test_corrupt_model_names_the_file_and_the_fix(tmp_path) -> None:
    bad = tmp_path / "yolov8n.onnx"
    bad.write_bytes(np.random.default_rng(0).bytes(4096))
    with pytest.raises(BackendError) as info:
        OnnxBackend(_config(str(bad)))
    assert str(bad) in str(info.value) and "npudure model build --force" in str(info.value)


def test_missing_model_and_hash_mismatch(tmp_path, model) -> None:
    missing = tmp_path / "nope.onnx"
    with pytest.raises(BackendError, match="does not exist"):
        OnnxBackend(_config(str(missing)))
    with pytest.raises(BackendError, match="npudure model build"):
        OnnxBackend(AgentConfig(node_name="t", backend="onnx"))
    with pytest.raises(BackendError, match="sha256"):
        OnnxBackend(_config(str(model.path), model_sha256="0" * 64))


def test_a_model_of_the_wrong_kind_is_refused(tmp_path) -> None:
    import onnx
    from onnx import TensorProto, helper

    def identity(shape: list[int]) -> str:
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)
        graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [x], [y])
        path = tmp_path / f"identity-{shape[2]}x{shape[3]}.onnx"
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
        return str(path)

    # Any square side that is a multiple of 32 is taken; the outputs are not YOLOv8's.
    with pytest.raises(BackendError, match="cannot read YOLOv8 outputs"):
        OnnxBackend(_config(identity([1, 3, 320, 320])))
    with pytest.raises(BackendError, match=r"\[1,3,S,S\] image with a fixed side"):
        OnnxBackend(_config(identity([1, 3, 320, 480])))


def test_without_onnxruntime_says_how_to_install(monkeypatch, model) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(BackendError, match=r"pip install 'npudure\[onnx\]'"):
        OnnxBackend(_config(str(model.path)))


def test_contexts_sets_the_session_count_and_a_measured_session_must_fit(
    model, monkeypatch, tmp_path
) -> None:
    three = create_backend(_config(str(model.path), npu_cores=1, contexts=3))
    assert len(three.contexts) == 3
    three.close()
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemAvailable: 1024 kB\n")  # 1 MiB: less than one YOLOv8n session
    monkeypatch.setattr(memory, "MEMINFO", str(meminfo))
    with pytest.raises(memory.ContextMemoryError) as info:
        create_backend(_config(str(model.path), contexts=2))
    text = str(info.value)
    assert text.startswith("2 contexts need 2 x ") and "(the RSS growth of the first ONNX session)" in text
    assert "1 already made" in text and "set contexts to 1 or fewer" in text
