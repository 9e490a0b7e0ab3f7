"""The YOLOv8n builder: real size, both layouts agree, cache, INT8, CLI, seeded frames."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from npudure.cli import main  # noqa: E402
from npudure.vision.frames import synthetic_frame  # noqa: E402
from npudure.vision.postprocess import postprocess  # noqa: E402
from npudure_workshop.model.build import ModelBuildError, build_yolov8n, default_model_path, ensure_model  # noqa: E402
from npudure_workshop.model.calibrate import to_nchw  # noqa: E402
from npudure_workshop.model.info import inspect  # noqa: E402

# ultralytics' own summary of yolov8n.yaml: 3,157,200 parameters, 3,151,904 once BatchNorm is fused
# into the convs, 8.7 GFLOPs.
ULTRALYTICS_PARAMS, ULTRALYTICS_FUSED_PARAMS, ULTRALYTICS_GFLOPS = 3_157_200, 3_151_904, 8.7


@pytest.fixture(scope="module")
def split(model_cache):
    return ensure_model("split")


@pytest.fixture(scope="module")
def zoo(model_cache):
    return ensure_model("zoo")


def _run(path: Path, frame: np.ndarray) -> list[np.ndarray]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {"images": to_nchw([frame])})


def test_real_size_params_and_flops(split) -> None:
    assert split.params == pytest.approx(3.15e6, rel=0.05)
    assert split.params == ULTRALYTICS_FUSED_PARAMS
    assert split.params_unfused == ULTRALYTICS_PARAMS
    assert split.gflops == pytest.approx(ULTRALYTICS_GFLOPS, rel=0.10)
    info = inspect(split.path)
    assert (info.params, info.flops, info.sha256) == (split.params, split.flops, split.sha256)
    assert [str(t) for t in info.inputs] == ["images [1,3,640,640] float"]
    assert [str(t) for t in info.outputs] == ["boxes [1,4,8400] float", "scores [1,80,8400] float"]
    assert info.metadata["npudure.trained"] == "false"


def test_zoo_layout_has_nine_outputs_and_decodes_like_split(split, zoo) -> None:
    frame = synthetic_frame(3)
    zoo_out = _run(zoo.path, frame)
    assert [o.shape for o in zoo_out] == [
        (1, 64, 80, 80), (1, 80, 80, 80), (1, 1, 80, 80),
        (1, 64, 40, 40), (1, 80, 40, 40), (1, 1, 40, 40),
        (1, 64, 20, 20), (1, 80, 20, 20), (1, 1, 20, 20),
    ]  # fmt: skip
    cls, total = zoo_out[1], zoo_out[2]
    assert cls.min() >= 0 and cls.max() <= 1
    np.testing.assert_allclose(total, np.clip(cls.sum(axis=1, keepdims=True), 0, 1), atol=1e-5)
    # The same weights: DFL decoded inside the graph (split) and in numpy (zoo) give the same boxes.
    from_split = postprocess(_run(split.path, frame))
    from_zoo = postprocess(zoo_out)
    assert len(from_split) > 0
    np.testing.assert_allclose(from_zoo, from_split, atol=0.05)


def test_output_depends_on_the_input(split) -> None:
    a, b = (postprocess(_run(split.path, synthetic_frame(s))) for s in (10, 11))
    assert len(a) > 0 and len(b) > 0
    assert a.shape != b.shape or not np.allclose(a, b)


def test_cache_reuses_rebuilds_corrupt_and_forces(model_cache, split) -> None:
    assert split.path == default_model_path("split") and split.path.is_relative_to(model_cache)
    again = ensure_model("split")
    assert again.cached and again.sha256 == split.sha256
    target = model_cache / "corrupt.onnx"
    target.write_bytes(b"\x00garbage" * 100)
    rebuilt = ensure_model("split", path=target)
    assert not rebuilt.cached and rebuilt.sha256 == split.sha256  # deterministic for a seed
    assert not ensure_model("split", path=target, force=True).cached


def test_seed_changes_the_weights(model_cache, split, tmp_path) -> None:
    other = build_yolov8n(tmp_path / "seed1.onnx", seed=1)
    assert other.sha256 != split.sha256 and other.params == split.params
    frame = synthetic_frame(4)
    assert not np.allclose(_run(other.path, frame)[1], _run(split.path, frame)[1])


def test_int8_build(model_cache, split) -> None:
    q = ensure_model("split", int8=True)
    assert q.path.name == "yolov8n-split-int8-seed0.onnx"
    info = inspect(q.path)
    assert info.quantized and info.params == split.params
    assert q.path.stat().st_size < split.path.stat().st_size / 2
    dets = postprocess(_run(q.path, synthetic_frame(3)))
    assert dets.ndim == 2 and dets.shape[1] == 6 and len(dets) > 0


def test_bad_build_arguments(tmp_path) -> None:
    with pytest.raises(ModelBuildError, match="--layout split"):
        build_yolov8n(tmp_path / "x.onnx", layout="zoo", int8=True)
    with pytest.raises(ModelBuildError, match="unknown layout"):
        build_yolov8n(tmp_path / "x.onnx", layout="nope")  # type: ignore[arg-type]
    assert not (tmp_path / "x.onnx").exists()


def test_cli_build_and_info(model_cache, split, capsys) -> None:
    assert main(["model", "build"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"cached  {split.path}") and split.sha256 in out and "3,151,904" in out
    assert main(["model", "info", str(split.path)]) == 0
    out = capsys.readouterr().out
    assert "output  scores [1,80,8400] float" in out and "GFLOPs  8.74" in out
    assert main(["model", "build", "--layout", "zoo", "--int8"]) == 2
    assert "--layout split" in capsys.readouterr().err
    garbage = model_cache / "garbage.onnx"
    garbage.write_bytes(b"not a model")
    assert main(["model", "info", str(garbage)]) == 1
    assert "npudure model build --force" in capsys.readouterr().err


def test_cli_frames_writes_a_dataset(tmp_path, capsys) -> None:
    assert main(["model", "frames", "--out", str(tmp_path), "--count", "2", "--first-seed", "5"]) == 0
    listed = (tmp_path / "dataset.txt").read_text().split()
    assert [Path(p).name for p in listed] == ["frame-000005.png", "frame-000006.png"]
    from PIL import Image

    assert np.array_equal(np.asarray(Image.open(listed[0])), synthetic_frame(5))


def test_synthetic_frames_are_seeded() -> None:
    a = synthetic_frame(1)
    assert a.shape == (640, 640, 3) and a.dtype == np.uint8
    assert np.array_equal(a, synthetic_frame(1))
    assert not np.array_equal(a, synthetic_frame(2))
    assert a.std() > 20  # a scene, not a flat colour
