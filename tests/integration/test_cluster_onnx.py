"""End to end with a real network: scheduler → agent → ONNX Runtime YOLOv8n → post-processing → client."""

from __future__ import annotations

import grpc
import pytest

from npudure.proto import inference_pb2 as pb
from npudure.proto import inference_pb2_grpc as rpc
from npudure.vision import frames
from npudure.vision.frames import synthetic_frame
from npudure.vision.labels import COCO80
from npudure_workshop.lab.local import LocalCluster
from npudure_workshop.model import ensure_model


@pytest.fixture(scope="module")
def onnx_cluster(tmp_path_factory):
    model = ensure_model(path=tmp_path_factory.mktemp("model") / "yolov8n.onnx")
    with LocalCluster(
        boards=2,
        backend="onnx",
        model=str(model.path),
        npu_cores=1,
        agent_overrides={"model_sha256": model.sha256, "onnx_threads": 1},
    ) as cluster:
        yield cluster


@pytest.mark.parametrize("encoding", ["raw", "jpeg"])
def test_onnx_backend_returns_detections_end_to_end(onnx_cluster: LocalCluster, encoding: str) -> None:
    image = synthetic_frame(3)
    if encoding == "jpeg":
        request = pb.InferRequest(encoding=pb.ENCODING_JPEG, frame=frames.encode_jpeg(image, quality=95))
    else:
        request = pb.InferRequest(encoding=pb.ENCODING_RAW_RGB, frame=image.tobytes())
    with grpc.insecure_channel(
        onnx_cluster.address, options=[("grpc.max_send_message_length", 8 << 20)]
    ) as ch:
        reply = rpc.InferenceStub(ch).Infer(request, timeout=60)
    assert reply.backend == "onnx" and not reply.emulated
    assert len(reply.detections) > 0
    for det in reply.detections:
        assert 0 <= det.x1 < det.x2 <= 640 and 0 <= det.y1 < det.y2 <= 640
        assert 0.25 <= det.score <= 1.0 and 0 <= det.class_id < 80
        assert det.label == COCO80[det.class_id]  # npudure's own model is COCO-shaped
    t = reply.timing
    assert t.inference_us > 0 and t.preprocess_us > 0 and t.postprocess_us > 0


def test_onnx_status_reports_runtime_and_model_hash(onnx_cluster: LocalCluster) -> None:
    with grpc.insecure_channel(onnx_cluster.agents["board1"].address) as ch:
        status = rpc.NodeStub(ch).GetStatus(pb.NodeStatusRequest(), timeout=10)
    assert status.runtime_version.startswith("onnxruntime")
    assert len(status.model_sha256) == 64
    assert status.telemetry.process_cpu_user_s > 0
