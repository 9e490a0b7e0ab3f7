"""A reference no one here wrote: ultralytics' own predictor on the same standard-export ONNX file and
the same images agrees with npudure's board path (decode + letterbox, ONNX Runtime, post-processing,
inverse letterbox): same detections, classes and names, boxes within 1 px, scores within 0.01.

ultralytics needs torch, so it lives in a virtualenv of its own, never npudure's: point
NPUDURE_ULTRALYTICS_PYTHON at its interpreter (e.g. `python3.11 -m venv V && V/bin/pip install
torch ultralytics onnxruntime`). Skipped, with that reason, where it is not set.

The images (photos from scikit-image's wheel) are letterboxed without resampling — 320x240 and a
portrait 240x320 into the 320 input, padding only — because ultralytics resizes with OpenCV and npudure
with Pillow: their bilinear filters differ (Pillow antialiases), and an untrained model's scores follow
pixel differences (a 2x upscale moved scores by up to 0.05). The scale part of the inverse letterbox is
checked against a letterbox done by hand in tests/unit/vision/test_any_size.py.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

pytest.importorskip("onnxruntime")

from npudure.backends import create_backend
from npudure.config import AgentConfig
from npudure.proto import inference_pb2 as pb
from npudure.vision.frames import decode_for_model
from npudure_workshop.model import photos
from npudure_workshop.model.build import ensure_model

PYTHON = os.environ.get("NPUDURE_ULTRALYTICS_PYTHON", "")
HERE = Path(__file__).resolve().parent
NAMES = ("forklift", "pallet")
SIZE = 320

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not PYTHON or not Path(PYTHON).is_file(),
        reason="ultralytics is not installed here: set NPUDURE_ULTRALYTICS_PYTHON to a venv's python "
        "that has torch and ultralytics",
    ),
    pytest.mark.skipif(photos.version() is None, reason="scikit-image (its photographs) is not installed"),
]


@pytest.fixture(scope="module")
def case(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("parity")
    model = ensure_model("standard", nc=2, size=SIZE, names=NAMES, path=tmp / "two.onnx")
    images = []
    with Image.open(photos.photo_path("astronaut.png")) as img:
        pad_only = img.convert("RGB").resize((320, 240), Image.Resampling.BILINEAR)
    pad_only.save(tmp / "pad-only-320x240.png")
    images.append(tmp / "pad-only-320x240.png")
    with Image.open(photos.photo_path("coffee.png")) as img:
        portrait = img.convert("RGB").resize((240, 320), Image.Resampling.BILINEAR)
    portrait.save(tmp / "portrait-240x320.png")
    images.append(tmp / "portrait-240x320.png")
    request = tmp / "request.json"
    request.write_text(
        json.dumps(
            {
                "onnx": str(model.path),
                "images": [str(p) for p in images],
                "imgsz": SIZE,
                "conf": 0.25,
                "iou": 0.45,
            }
        )
    )
    done = subprocess.run(
        [PYTHON, str(HERE.parent / "helpers" / "ultralytics_predict.py"), str(request)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "YOLO_OFFLINE": "1", "YOLO_CONFIG_DIR": str(tmp / "yolo-config")},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    reference = json.loads(done.stdout.strip().splitlines()[-1])
    return {"model": model, "images": images, "reference": reference}


def ours(model_path: Path, image: Path) -> np.ndarray:
    backend = create_backend(AgentConfig(node_name="p", backend="onnx", model=str(model_path), npu_cores=1))
    try:
        frame, geometry = decode_for_model(pb.ENCODING_PNG, image.read_bytes(), backend.input_size)
        return geometry.to_source(backend.contexts[0].run(frame).detections)
    finally:
        backend.close()


def test_npudure_agrees_with_ultralytics_predictor(case) -> None:
    print(f"ultralytics {case['reference']['ultralytics']}")
    compared = 0
    for image in case["images"]:
        ref = case["reference"]["results"][str(image)]
        theirs = np.column_stack([np.array(ref["xyxy"]).reshape(-1, 4), ref["conf"], ref["cls"]]).astype(
            np.float32
        )
        mine = ours(case["model"].path, image)
        # Both sorted by score, highest first.
        theirs = theirs[np.argsort(-theirs[:, 4], kind="stable")]
        np.set_printoptions(precision=2, suppress=True, linewidth=150)
        assert len(mine) == len(theirs), f"{image.name}\nours\n{mine}\ntheirs\n{theirs}"
        np.testing.assert_array_equal(mine[:, 5], theirs[:, 5])
        np.testing.assert_allclose(mine[:, 4], theirs[:, 4], atol=0.01)
        np.testing.assert_allclose(mine[:, :4], theirs[:, :4], atol=1.0)
        # ultralytics read the same names from the metadata.
        assert sorted(ref["names"]) == sorted(NAMES[int(c)] for c in mine[:, 5])
        compared += len(mine)
        print(
            f"{image.name}: {len(mine)} detections agree; max box difference "
            f"{float(np.abs(mine[:, :4] - theirs[:, :4]).max(initial=0)):.4f} px, max score difference "
            f"{float(np.abs(mine[:, 4] - theirs[:, 4]).max(initial=0)):.5f}"
        )
    assert compared > 0
