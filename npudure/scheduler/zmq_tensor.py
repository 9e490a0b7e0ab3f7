"""Frigate's `zmq` detector protocol, without the socket: a request's tensor in, its reply out.

Frigate (frigate/detectors/plugins/zmq_ipc.py) sends multipart ``[header, tensor]``: the header is JSON
``{"shape": [...], "dtype": "uint8" | "float32", "model_type": ...}`` and the tensor raw bytes in C order,
shaped as the user's Frigate ``model:`` block says (nhwc or nchw, a batch of one or none). It reads back
20 x 6 float32 rows ``[class_id, score, y_min, x_min, y_max, x_max]``, normalised to the tensor, zeros
for empty rows: one frame, or ``[header, tensor]`` whose JSON header gives ``shape`` and ``dtype`` (it
reads no other key). We answer the second way, the header also saying what happened (``code``) and, when
answered, which board and how long each stage took (what a benchmark of this path reads). The pixel
format is not sent: the tensor is taken as RGB (``input_pixel_format: rgb`` in Frigate,
docs/frigate-zmq.md).

Everything here is pure (numpy only), so every malformed header or tensor is a unit test.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from npudure.proto import inference_pb2 as pb
from npudure.proto import timing as stage_timing
from npudure.vision.frames import MAX_IMAGE_PIXELS, MAX_IMAGE_SIDE

ROWS = 20  # Frigate reads at most 20 detections
EMPTY_REPLY = np.zeros((ROWS, 6), np.float32).tobytes()  # 480 bytes: "nothing found"
DTYPES: dict[str, np.dtype] = {"uint8": np.dtype(np.uint8), "float32": np.dtype(np.float32)}
MAX_HEADER_BYTES = 4096


class TensorError(ValueError):
    """A request this endpoint cannot serve; the message names what is wrong, for the log."""


@dataclass(frozen=True, slots=True)
class Tensor:
    """A request's image as an H x W x 3 uint8 RGB frame (C order), ready to go to a board raw."""

    frame: bytes
    width: int
    height: int
    layout: str  # "nhwc" or "nchw", as read from the shape
    scaled_from: str  # how float32 values were read: "" (uint8), "0-1" or "0-255"


def _header(data: bytes | memoryview) -> tuple[list[int], np.dtype]:
    if len(data) > MAX_HEADER_BYTES:
        raise TensorError(
            f"the header frame is {len(data)} bytes; a JSON header is at most {MAX_HEADER_BYTES}"
        )
    try:
        header = json.loads(bytes(data))
    except (UnicodeDecodeError, ValueError):
        raise TensorError("the header frame is not JSON (Frigate sends {shape, dtype, model_type})") from None
    if not isinstance(header, dict):
        raise TensorError("the header is not a JSON object with shape and dtype")
    shape, dtype = header.get("shape"), header.get("dtype")
    if not isinstance(shape, list) or not all(isinstance(n, int) and not isinstance(n, bool) for n in shape):
        raise TensorError(f"header shape must be a list of integers (got {str(shape)[:40]})")
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise TensorError(f"dtype {str(dtype)[:20]!r} is not served; send uint8 or float32")
    return shape, DTYPES[dtype]


def _sides(shape: list[int]) -> tuple[int, int, str]:
    """(width, height, layout) of a [1,] H, W, 3 (nhwc) or [1,] 3, H, W (nchw) shape."""
    dims = shape[1:] if len(shape) == 4 and shape[0] == 1 else shape
    if len(dims) != 3:
        raise TensorError(f"shape {shape} is not one image: use [1, H, W, 3] (nhwc) or [1, 3, H, W] (nchw)")
    if dims[2] == 3:
        height, width, layout = dims[0], dims[1], "nhwc"
    elif dims[0] == 3:
        height, width, layout = dims[1], dims[2], "nchw"
    else:
        raise TensorError(f"shape {shape} has no 3-channel axis first or last (RGB, nhwc or nchw)")
    if width < 1 or height < 1:
        raise TensorError(f"shape {shape} has an empty side")
    if width > MAX_IMAGE_SIDE or height > MAX_IMAGE_SIDE or width * height > MAX_IMAGE_PIXELS:
        raise TensorError(
            f"a {width}x{height} tensor is larger than the boards take ({MAX_IMAGE_SIDE} a side)"
        )
    return width, height, layout


def read_request(header: bytes | memoryview, tensor: bytes | memoryview) -> Tensor:
    """The request's image, checked; TensorError for anything else."""
    shape, dtype = _header(header)
    width, height, layout = _sides(shape)
    expected = width * height * 3 * dtype.itemsize
    if len(tensor) != expected:
        raise TensorError(
            f"the tensor has {len(tensor)} bytes; shape {shape} of {dtype.name} needs exactly {expected}"
        )
    pixels = np.frombuffer(tensor, dtype=dtype)
    pixels = pixels.reshape((height, width, 3) if layout == "nhwc" else (3, height, width))
    if layout == "nchw":
        pixels = pixels.transpose(1, 2, 0)
    scaled_from = ""
    if dtype == np.float32:
        pixels, scaled_from = _float_to_uint8(pixels)
    return Tensor(np.ascontiguousarray(pixels, dtype=np.uint8).tobytes(), width, height, layout, scaled_from)


def _float_to_uint8(pixels: np.ndarray) -> tuple[np.ndarray, str]:
    """float32 pixels as uint8: 0-1 when no value is above 1 (a normalised tensor), else 0-255."""
    top = float(np.max(pixels)) if pixels.size else 0.0
    if not math.isfinite(top) or not np.isfinite(pixels).all():
        raise TensorError("the float32 tensor holds NaN or infinity")
    unit = top <= 1.0
    scaled = pixels * 255.0 if unit else pixels
    return np.clip(np.rint(scaled), 0, 255).astype(np.uint8), "0-1" if unit else "0-255"


def board_request(tensor: Tensor, request_id: str, model: str = "") -> bytes:
    """The InferRequest a board gets: the raw frame with its sides (the board letterboxes it), naming
    the endpoint's model ("" = the default)."""
    return pb.InferRequest(
        request_id=request_id,
        encoding=pb.ENCODING_RAW_RGB,
        frame=tensor.frame,
        width=tensor.width,
        height=tensor.height,
        model=model,
    ).SerializeToString()


def reply_header(code: str, response: pb.InferResponse | None = None) -> bytes:
    """The reply's JSON header: Frigate's shape and dtype, the outcome (a gRPC code name), and for an
    answered frame the board, model, attempts and stage timing (microseconds) as the HTTP API gives them."""
    header: dict[str, object] = {"shape": [ROWS, 6], "dtype": "float32", "code": code}
    if response is not None:
        header |= {
            "node": response.node,
            "model": response.model,
            "backend": response.backend,
            "emulated": response.emulated,
            "attempts": response.attempts,
            "timing": stage_timing.as_dict(response.timing),
        }
    return json.dumps(header, separators=(",", ":")).encode()


def reply(detections: Sequence[pb.Detection], width: int, height: int) -> bytes:
    """Frigate's 20 x 6 float32 answer: the highest scores first, boxes normalised to the tensor."""
    rows = np.zeros((ROWS, 6), np.float32)
    best = sorted(detections, key=lambda d: -d.score)[:ROWS]
    for i, d in enumerate(best):
        rows[i] = (d.class_id, d.score, d.y1 / height, d.x1 / width, d.y2 / height, d.x2 / width)
    np.clip(rows[:, 2:], 0.0, 1.0, out=rows[:, 2:])
    return rows.tobytes()
