"""Turn the bytes of an InferRequest into a 640x640x3 uint8 RGB frame, or say exactly what is wrong."""

from __future__ import annotations

import io

import grpc
import numpy as np

from npudure.backends.base import FRAME_BYTES, FRAME_SHAPE, INPUT_SIZE
from npudure.proto import inference_pb2 as pb


class FrameError(Exception):
    """A bad frame: carries the gRPC status code the client gets."""

    def __init__(self, message: str, code: grpc.StatusCode = grpc.StatusCode.INVALID_ARGUMENT) -> None:
        super().__init__(message)
        self.code = code


def check_request(encoding: int, frame: bytes) -> None:
    """Cheap checks done before a frame waits for an NPU core (so bad input never takes a slot)."""
    if encoding == pb.ENCODING_RAW_RGB:
        if len(frame) != FRAME_BYTES:
            raise FrameError(
                f"raw frame has {len(frame)} bytes; ENCODING_RAW_RGB needs exactly {FRAME_BYTES} "
                f"({INPUT_SIZE}x{INPUT_SIZE}x3 uint8 RGB). Resize to {INPUT_SIZE}x{INPUT_SIZE} or send JPEG"
            )
    elif encoding == pb.ENCODING_JPEG:
        if not frame:
            raise FrameError("empty frame: ENCODING_JPEG needs the bytes of a JPEG file")
        if frame[:2] != b"\xff\xd8":
            raise FrameError("frame is not a JPEG (it does not start with the JPEG marker FF D8)")
    else:
        name = pb.Encoding.Name(encoding) if encoding in pb.Encoding.values() else str(encoding)
        raise FrameError(f"encoding {name} is not supported; set ENCODING_RAW_RGB or ENCODING_JPEG")


def decode(encoding: int, frame: bytes) -> np.ndarray:
    """Return the frame as a read-only (640, 640, 3) uint8 array (raw frames are not copied)."""
    check_request(encoding, frame)
    if encoding == pb.ENCODING_RAW_RGB:
        return np.frombuffer(frame, dtype=np.uint8).reshape(FRAME_SHAPE)
    from PIL import Image

    try:
        # Image.open reads only the header: the claimed size is checked here, before any pixel is decoded.
        with Image.open(io.BytesIO(frame), formats=["JPEG"]) as image:
            if image.size != (INPUT_SIZE, INPUT_SIZE):
                raise FrameError(
                    f"JPEG is {image.size[0]}x{image.size[1]}; the model takes {INPUT_SIZE}x{INPUT_SIZE}: "
                    "resize (letterbox) before sending"
                )
            return np.asarray(image.convert("RGB"))
    except FrameError:
        raise
    except Image.DecompressionBombError:
        raise FrameError(
            f"JPEG header claims an image far larger than {INPUT_SIZE}x{INPUT_SIZE}: "
            "resize (letterbox) before sending"
        ) from None
    except Exception as exc:  # any decoder failure is the request's fault, never the board's
        raise FrameError(f"frame is not a valid JPEG (corrupt or truncated): {exc}") from None


def encode_jpeg(image: np.ndarray, quality: int = 90) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(image), "RGB").save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()
