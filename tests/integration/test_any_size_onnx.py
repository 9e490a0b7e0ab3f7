"""End to end on real processes: a 2-class 320x320 standard export (names in its metadata) served by
an agent (ONNX Runtime backend) behind the scheduler. Images of any size come back with named boxes
in the source image's pixels, equal to a letterbox done by hand plus the same model run in-process."""

from __future__ import annotations

import io

import grpc
import numpy as np
import pytest
from PIL import Image

pytest.importorskip("onnxruntime")

from helpers.two_class_model import NAMES, SIZE, one_board_cluster

from npudure.backends import create_backend
from npudure.config import AgentConfig
from npudure.proto import inference_pb2 as pb
from npudure.proto import inference_pb2_grpc as rpc
from npudure.vision.frames import LETTERBOX_FILL, synthetic_frame

SOURCES = [(1920, 1080), (1280, 720), (320, 320), (1080, 1920), (1, 1)]


@pytest.fixture(scope="module")
def cluster(two_class_onnx):
    with one_board_cluster(two_class_onnx) as c:
        yield c


@pytest.fixture(scope="module")
def reference(two_class_onnx):
    backend = create_backend(
        AgentConfig(node_name="ref", backend="onnx", model=str(two_class_onnx.path), npu_cores=1)
    )
    yield backend
    backend.close()


def source_image(w: int, h: int) -> Image.Image:
    """Scene-like content at any size: a seeded synthetic frame stretched to w x h."""
    return Image.fromarray(synthetic_frame(11, 512)).resize((w, h), Image.Resampling.BILINEAR)


def expected(reference, image: Image.Image) -> np.ndarray:
    """Letterbox by hand (ultralytics' rule), run the model, map boxes back by hand."""
    w, h = image.size
    r = SIZE / max(w, h)
    nw, nh = max(1, round(w * r)), max(1, round(h * r))
    left, top = (SIZE - nw) // 2, (SIZE - nh) // 2
    canvas = Image.new("RGB", (SIZE, SIZE), (LETTERBOX_FILL,) * 3)
    canvas.paste(image.resize((nw, nh), Image.Resampling.BILINEAR), (left, top))
    dets = reference.contexts[0].run(np.asarray(canvas)).detections.copy()
    dets[:, [0, 2]] = np.clip((dets[:, [0, 2]] - left) * w / nw, 0, w)
    dets[:, [1, 3]] = np.clip((dets[:, [1, 3]] - top) * h / nh, 0, h)
    return dets


def infer(address: str, encoding: int, data: bytes) -> pb.InferResponse:
    with grpc.insecure_channel(address, options=[("grpc.max_send_message_length", 16 << 20)]) as ch:
        return rpc.InferenceStub(ch).Infer(pb.InferRequest(encoding=encoding, frame=data), timeout=60)


@pytest.mark.parametrize(("w", "h"), SOURCES)
def test_png_of_any_size_gives_named_boxes_in_source_pixels(cluster, reference, w: int, h: int) -> None:
    image = source_image(w, h)
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    reply = infer(cluster.address, pb.ENCODING_PNG, buf.getvalue())
    want = expected(reference, image)
    rows = [[d.x1, d.y1, d.x2, d.y2, d.score, d.class_id] for d in reply.detections]
    got = np.array(rows, np.float32).reshape(-1, 6)
    assert got.shape == want.shape
    if (w, h) != (1, 1):
        assert len(got) > 0  # the untrained model finds a steady handful on scene-like frames
    np.testing.assert_allclose(got[:, :4], want[:, :4], atol=0.05 * max(w, h) / SIZE + 0.01)
    np.testing.assert_allclose(got[:, 4:], want[:, 4:], atol=1e-4)
    for d in reply.detections:
        assert d.label == NAMES[d.class_id]
        assert 0 <= d.x1 <= d.x2 <= w and 0 <= d.y1 <= d.y2 <= h


def test_1080p_jpeg_comes_back_in_1080p_pixels(cluster) -> None:
    buf = io.BytesIO()
    source_image(1920, 1080).save(buf, format="JPEG", quality=90)
    reply = infer(cluster.address, pb.ENCODING_JPEG, buf.getvalue())
    assert reply.detections and {d.label for d in reply.detections} <= set(NAMES)
    assert max(d.x2 for d in reply.detections) > SIZE  # source pixels, not the model's 320
    assert all(0 <= d.x1 <= d.x2 <= 1920 and 0 <= d.y1 <= d.y2 <= 1080 for d in reply.detections)


def test_raw_frames_at_the_model_size_and_bombs_refused(cluster) -> None:
    frame = synthetic_frame(5, SIZE)
    reply = infer(cluster.address, pb.ENCODING_RAW_RGB, frame.tobytes())
    assert all(d.x2 <= SIZE and d.y2 <= SIZE for d in reply.detections)
    with pytest.raises(grpc.RpcError) as err:
        infer(cluster.address, pb.ENCODING_RAW_RGB, synthetic_frame(5).tobytes())  # a 640 frame
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "307200" in err.value.details()


def test_cli_sends_a_1080p_jpeg_file_as_it_is(cluster, tmp_path) -> None:
    import json
    import subprocess
    import sys

    path = tmp_path / "camera.jpg"
    source_image(1920, 1080).save(path, format="JPEG", quality=90)
    args = [sys.executable, "-m", "npudure", "infer", "--target", cluster.address, "--encoding", "file"]
    proc = subprocess.run(
        [*args, "--image", str(path), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    reply = json.loads(proc.stdout.splitlines()[0])
    dets = reply["detections"]
    assert dets and all(d["label"] in NAMES for d in dets)
    assert max(d.get("x2", 0) for d in dets) > SIZE and all(d.get("y2", 0) <= 1080 for d in dets)
