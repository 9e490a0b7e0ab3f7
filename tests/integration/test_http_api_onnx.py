"""Integration: the HTTP API in front of a real model (ONNX Runtime backend) — real detections, the
model's own labels, boxes in the posted image's pixels, all worked out by the board from the bytes
as they were posted.

The model is a 2-class 320x320 standard export with its own names (not COCO), so a label that came
from the scheduler's COCO table instead of the board would show.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
import requests
from PIL import Image

pytest.importorskip("onnxruntime")

from helpers.deepstack_requests import hand_letterbox, jpeg
from helpers.two_class_model import NAMES, SIZE, one_board_cluster

from npudure.backends import create_backend
from npudure.config import AgentConfig
from npudure.proto import inference_pb2 as pb
from npudure.proto import inference_pb2_grpc as rpc
from npudure.security import access as security
from npudure.vision.frames import synthetic_frame


@pytest.fixture(scope="module")
def cluster(two_class_onnx):
    with one_board_cluster(two_class_onnx, http_api=True) as c:
        yield c


def detect(url: str, image: bytes, mime: str) -> dict:
    reply = requests.post(
        url, files={"image": ("frame", image, mime)}, data={"min_confidence": "0"}, timeout=60
    )
    assert reply.status_code == 200, reply.text
    return reply.json()


def grpc_jpeg(address: str, data: bytes) -> list[pb.Detection]:
    with security.channel(address) as channel:
        reply = rpc.InferenceStub(channel).Infer(
            pb.InferRequest(encoding=pb.ENCODING_JPEG, frame=data), timeout=60
        )
    return list(reply.detections)


def test_frigate_sized_jpeg_gets_what_grpc_gets_for_the_same_bytes(cluster) -> None:
    data = jpeg(synthetic_frame(11, SIZE))
    body = detect(cluster.http_url, data, "image/jpeg")
    want = sorted(grpc_jpeg(cluster.address, data), key=lambda d: -d.score)
    want = [d for d in want if round(d.x2) > round(d.x1) and round(d.y2) > round(d.y1)]
    assert want, "the untrained model found nothing in this frame; pick another seed"
    got = body["predictions"]
    assert [(p["label"], p["confidence"]) for p in got] == [(d.label, round(d.score, 4)) for d in want]
    assert [(p["x_min"], p["y_min"], p["x_max"], p["y_max"]) for p in got] == [
        (round(d.x1), round(d.y1), round(d.x2), round(d.y2)) for d in want
    ]
    assert {p["label"] for p in got} <= set(NAMES)
    assert body["timing"]["decode_us"] > 0 and body["backend"] == "onnx" and body["emulated"] is False


def test_a_wide_png_comes_back_in_its_own_pixels(cluster, two_class_onnx) -> None:
    """Against the model run in-process on a letterbox done by hand, mapped back by hand."""
    image = np.asarray(
        Image.fromarray(synthetic_frame(11, 512)).resize((1280, 720), Image.Resampling.BILINEAR)
    )
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format="PNG")
    body = detect(cluster.http_url, buf.getvalue(), "image/png")
    assert (body["imageWidth"], body["imageHeight"]) == (1280, 720)
    lb = hand_letterbox(image, SIZE)
    backend = create_backend(
        AgentConfig(node_name="ref", backend="onnx", model=str(two_class_onnx.path), npu_cores=1)
    )
    try:
        dets = backend.contexts[0].run(lb.frame).detections
    finally:
        backend.close()
    want = []
    for x1, y1, x2, y2, score, cls in sorted(dets.tolist(), key=lambda d: -d[4]):
        box = [
            min(max((x1 - lb.left) * 1280 / lb.new_w, 0), 1280),
            min(max((y1 - lb.top) * 720 / lb.new_h, 0), 720),
            min(max((x2 - lb.left) * 1280 / lb.new_w, 0), 1280),
            min(max((y2 - lb.top) * 720 / lb.new_h, 0), 720),
        ]
        if round(box[2]) > round(box[0]) and round(box[3]) > round(box[1]):
            want.append((NAMES[int(cls)], score, box))
    got = body["predictions"]
    assert len(got) == len(want) > 0
    assert max(p["x_max"] for p in got) > SIZE  # the posted image's pixels, not the model's 320
    for p, (label, score, box) in zip(got, want, strict=True):
        assert p["label"] == label and abs(p["confidence"] - score) < 1e-3
        assert np.allclose([p["x_min"], p["y_min"], p["x_max"], p["y_max"]], box, atol=1.5), (p, box)
