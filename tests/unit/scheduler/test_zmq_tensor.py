"""Frigate's zmq request and reply, without a socket: every layout and dtype Frigate's model block can
shape, every malformed header or tensor refused with a reason, and the 20 x 6 reply as Frigate reads it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from npudure.proto import inference_pb2 as pb
from npudure.scheduler import zmq_tensor
from npudure.scheduler.zmq_tensor import TensorError, read_request, reply


def _header(shape: list[int], dtype: str = "uint8") -> bytes:
    return json.dumps({"shape": shape, "dtype": dtype, "model_type": "yolo-generic"}).encode()


def _image(h: int = 4, w: int = 6) -> np.ndarray:
    return np.random.default_rng(3).integers(0, 256, (h, w, 3), dtype=np.uint8)


def test_nhwc_uint8_is_the_frame_as_sent() -> None:
    img = _image()
    t = read_request(_header([1, 4, 6, 3]), img.tobytes())
    assert (t.width, t.height, t.layout, t.scaled_from) == (6, 4, "nhwc", "")
    assert t.frame == img.tobytes()


def test_nchw_and_no_batch_axis_give_the_same_frame() -> None:
    img = _image()
    nchw = np.ascontiguousarray(img.transpose(2, 0, 1))
    assert read_request(_header([1, 3, 4, 6]), nchw.tobytes()).frame == img.tobytes()
    assert read_request(_header([4, 6, 3]), img.tobytes()).frame == img.tobytes()


@pytest.mark.parametrize(("scale", "read_as"), [(1 / 255, "0-1"), (1.0, "0-255")])
def test_float32_in_either_range_becomes_the_same_uint8(scale: float, read_as: str) -> None:
    img = _image()
    floats = (img.astype(np.float32) * scale).astype(np.float32)
    t = read_request(_header([1, 4, 6, 3], "float32"), floats.tobytes())
    assert t.scaled_from == read_as
    assert t.frame == img.tobytes()


@pytest.mark.parametrize(
    ("header", "tensor", "needle"),
    [
        (b"\xff\xfe", b"", "not JSON"),
        (b"[1, 2]", b"", "not a JSON object"),
        (b"x" * 5000, b"", "at most 4096"),
        (_header([1, 4, 6, 3], "int64"), b"", "send uint8 or float32"),
        (_header([1, 4, 6, 3], None), b"", "send uint8 or float32"),  # type: ignore[arg-type]
        (json.dumps({"shape": "1,4,6,3", "dtype": "uint8"}).encode(), b"", "list of integers"),
        (json.dumps({"shape": [1, 4.5, 6, 3], "dtype": "uint8"}).encode(), b"", "list of integers"),
        (_header([2, 4, 6, 3]), b"", "not one image"),
        (_header([1, 4, 6, 4]), b"", "no 3-channel axis"),
        (_header([1, 0, 6, 3]), b"", "empty side"),
        (_header([1, 9000, 2, 3]), b"", "larger than the boards take"),
        (_header([1, 4, 6, 3]), bytes(4 * 6 * 3 - 1), "needs exactly 72"),
        (_header([1, 4, 6, 3], "float32"), bytes(4 * 6 * 3), "needs exactly 288"),
        (_header([1, 4, 6, 3]), b"", "needs exactly 72"),
    ],
)
def test_what_cannot_be_served_is_refused_with_its_reason(header: bytes, tensor: bytes, needle: str) -> None:
    with pytest.raises(TensorError, match=needle):
        read_request(header, tensor)


def test_nan_floats_are_refused() -> None:
    floats = np.full((1, 4, 6, 3), np.nan, np.float32)
    with pytest.raises(TensorError, match="NaN"):
        read_request(_header([1, 4, 6, 3], "float32"), floats.tobytes())


def test_the_board_request_carries_the_sides() -> None:
    t = read_request(_header([1, 4, 6, 3]), _image().tobytes())
    msg = pb.InferRequest.FromString(zmq_tensor.board_request(t, "zmq-1"))
    assert (msg.encoding, msg.width, msg.height, msg.frame) == (pb.ENCODING_RAW_RGB, 6, 4, t.frame)


def _det(cls: int, score: float, x1: float, y1: float, x2: float, y2: float) -> pb.Detection:
    return pb.Detection(class_id=cls, score=score, x1=x1, y1=y1, x2=x2, y2=y2)


def test_the_reply_is_20_rows_best_first_normalised_to_the_tensor() -> None:
    dets = [_det(i % 80, 0.3 + i / 100, 10, 20, 30, 40) for i in range(25)]
    dets.append(_det(0, 0.99, -5, 0, 400, 300))  # a box past the edge is clipped to 1
    rows = np.frombuffer(reply(dets, width=320, height=240), np.float32).reshape(20, 6)
    assert rows[0].tolist() == pytest.approx([0, 0.99, 0, 0, 1, 1])
    assert list(rows[:, 1]) == sorted(rows[:, 1], reverse=True)
    assert rows[1].tolist() == pytest.approx([24 % 80, 0.54, 20 / 240, 10 / 320, 40 / 240, 30 / 320])


def test_no_detections_is_all_zeros() -> None:
    assert reply([], 320, 320) == zmq_tensor.EMPTY_REPLY == bytes(480)


def test_the_reply_header_is_what_frigate_reads_plus_the_outcome() -> None:
    """Frigate reads shape and dtype only; the rest (outcome, board, timing) is for the bench."""
    refused = json.loads(zmq_tensor.reply_header("INVALID_ARGUMENT"))
    assert refused == {"shape": [20, 6], "dtype": "float32", "code": "INVALID_ARGUMENT"}
    assert np.frombuffer(zmq_tensor.EMPTY_REPLY, refused["dtype"]).reshape(refused["shape"]).any() == 0
    response = pb.InferResponse(
        node="board2",
        model="yolov8n",
        attempts=2,
        timing=pb.StageTiming(board_total_us=9000, inference_us=7000),
    )
    answered = json.loads(zmq_tensor.reply_header("OK", response))
    assert (answered["code"], answered["node"], answered["model"], answered["attempts"]) == (
        "OK",
        "board2",
        "yolov8n",
        2,
    )
    assert answered["timing"]["board_total_us"] == 9000 and answered["timing"]["inference_us"] == 7000
    assert set(answered["timing"]) == {f.name for f in pb.StageTiming.DESCRIPTOR.fields}
