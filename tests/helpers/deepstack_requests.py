"""DeepStack API requests as camera software builds them, and the answer worked out by hand.

``frigate_detect`` builds its request exactly as Frigate's ``deepstack`` detector does
(frigate/detectors/plugins/deepstack.py, ``detect_raw``): the model-size tensor saved as a JPEG with
PIL's defaults, ``requests.post(api_url, data={"api_key": ...}, files={"image": bytes},
timeout=api_timeout)``, 0.1 s by default. ``expected_predictions`` is the inverse letterbox done by
hand from the boxes the cluster returns for the hand-letterboxed raw frame over gRPC.
"""

from __future__ import annotations

import io
import socket
import time
from dataclasses import dataclass

import numpy as np
import requests
from PIL import Image

from npudure.proto import inference_pb2 as pb
from npudure.proto import inference_pb2_grpc as rpc
from npudure.security import access as security
from npudure.vision.coco import COCO80

FRIGATE_TIMEOUT_S = 0.1  # Frigate's DeepstackDetectorConfig.api_timeout default
FRIGATE_THRESHOLD = 0.4  # Frigate stops reading at the first prediction under this


def jpeg(image: np.ndarray) -> bytes:
    """As Frigate encodes: ``Image.fromarray(...).save(output, format="JPEG")`` (PIL's default quality)."""
    with io.BytesIO() as output:
        Image.fromarray(image).save(output, format="JPEG")
        return output.getvalue()


def png(image: np.ndarray) -> bytes:
    with io.BytesIO() as output:
        Image.fromarray(image).save(output, format="PNG")
        return output.getvalue()


def frigate_detect(api_url: str, tensor_input: np.ndarray, api_key: str = "") -> requests.Response:
    image_data = np.squeeze(tensor_input).astype(np.uint8)
    return requests.post(
        api_url,
        data={"api_key": api_key},
        files={"image": jpeg(image_data)},
        timeout=FRIGATE_TIMEOUT_S,
    )


def frigate_rows(response_json: dict, w: int, h: int, labels: list[str]) -> np.ndarray:
    """What Frigate's detect_raw makes of the answer: (20, 6) rows label, score, y_min/h, x_min/w, ..."""
    detections = np.zeros((20, 6), np.float32)
    for i, d in enumerate(response_json["predictions"]):
        if d["confidence"] < FRIGATE_THRESHOLD:
            break
        label = labels.index(d["label"]) if d["label"] in labels else -1
        if label < 0:
            break
        detections[i] = [
            label,
            d["confidence"],
            d["y_min"] / h,
            d["x_min"] / w,
            d["y_max"] / h,
            d["x_max"] / w,
        ]
    return detections


@dataclass(frozen=True)
class HandLetterbox:
    frame: np.ndarray
    left: int
    top: int
    new_w: int
    new_h: int


def hand_letterbox(image: np.ndarray, size: int = 640) -> HandLetterbox:
    """Fit into size x size keeping the aspect ratio, centred on YOLOv8's grey (114), bilinear."""
    h, w = image.shape[:2]
    scale = size / max(w, h)
    new_w, new_h = max(1, round(w * scale)), max(1, round(h * scale))
    resized = Image.fromarray(image).resize((new_w, new_h), Image.Resampling.BILINEAR)
    canvas = Image.new("RGB", (size, size), (114, 114, 114))
    left, top = (size - new_w) // 2, (size - new_h) // 2
    canvas.paste(resized, (left, top))
    return HandLetterbox(np.asarray(canvas), left, top, new_w, new_h)


def grpc_detections(address: str, frame: np.ndarray) -> list[pb.Detection]:
    with security.channel(address, options=[("grpc.max_send_message_length", 16 << 20)]) as channel:
        reply = rpc.InferenceStub(channel).Infer(
            pb.InferRequest(encoding=pb.ENCODING_RAW_RGB, frame=frame.tobytes()), timeout=10
        )
    return list(reply.detections)


def expected_predictions(
    dets: list[pb.Detection], lb: HandLetterbox, w: int, h: int, min_confidence: float
) -> list[dict]:
    out = []
    for d in sorted(dets, key=lambda d: -d.score):
        if d.score < min_confidence:
            continue
        x1, x2 = (min(max((x - lb.left) * w / lb.new_w, 0), w) for x in (d.x1, d.x2))
        y1, y2 = (min(max((y - lb.top) * h / lb.new_h, 0), h) for y in (d.y1, d.y2))
        if round(x2) <= round(x1) or round(y2) <= round(y1):
            continue
        out.append({"label": COCO80[d.class_id], "confidence": d.score, "box": (x1, y1, x2, y2)})
    return out


def assert_matches(predictions: list[dict], expected: list[dict]) -> None:
    assert len(predictions) == len(expected), (predictions, expected)
    for got, want in zip(predictions, expected, strict=True):
        assert got["label"] == want["label"]
        assert abs(got["confidence"] - want["confidence"]) < 1e-3
        box = (got["x_min"], got["y_min"], got["x_max"], got["y_max"])
        assert all(isinstance(v, int) for v in box)
        assert np.allclose(box, want["box"], atol=1.0), (box, want["box"])


def slow_upload(host: str, port: int, head: bytes, trickle: bytes, every_s: float, for_s: float) -> bytes:
    """Send ``head``, then one byte of ``trickle`` every ``every_s`` for at most ``for_s``; return what
    the server answered (b"" when it just closed)."""
    with socket.create_connection((host, port), timeout=for_s + 5) as sock:
        sock.sendall(head)
        deadline = time.monotonic() + for_s
        sock.settimeout(every_s)
        for byte in trickle:
            if time.monotonic() >= deadline:
                break
            try:
                sock.sendall(bytes([byte]))
                data = sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return b""
            return data + _rest(sock)
        sock.settimeout(5)
        try:
            return sock.recv(65536)
        except OSError:
            return b""


def _rest(sock: socket.socket) -> bytes:
    sock.settimeout(1)
    chunks = []
    try:
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    except OSError:
        pass
    return b"".join(chunks)
