"""The one frame module: the model's input size, the request checks, decoding, and the frame makers.

The agent checks a request once at its edge (``check_request``, before it waits for an NPU core) and
decodes it on a worker (``decode_checked``); backends trust the (640, 640, 3) uint8 array they get.
The bench and the model builder make frames here too: seeded synthetic ones and user images fitted
to the input size.
"""

from __future__ import annotations

import io

import grpc
import numpy as np

from npudure.proto import inference_pb2 as pb
from npudure.vision import decode_budget

# The model's input: 640x640 RGB, uint8 (YOLOv8n as exported; every backend feeds this).
INPUT_SIZE = 640
FRAME_SHAPE = (INPUT_SIZE, INPUT_SIZE, 3)
FRAME_BYTES = INPUT_SIZE * INPUT_SIZE * 3  # 1,228,800


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
    """Check, then decode: a read-only (640, 640, 3) uint8 array (raw frames are not copied)."""
    check_request(encoding, frame)
    return decode_checked(encoding, frame)


def decode_checked(encoding: int, frame: bytes) -> np.ndarray:
    """Decode a frame that ``check_request`` already passed (the agent checks once, at its edge)."""
    if encoding == pb.ENCODING_RAW_RGB:
        return np.frombuffer(frame, dtype=np.uint8).reshape(FRAME_SHAPE)
    from PIL import Image

    try:  # the decoder's work bounded before any pixel is decoded (scans, marker segments)
        decode_budget.count_scans(frame)
    except decode_budget.BudgetError as exc:
        raise FrameError(str(exc)) from None
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


# ---------------------------------------------------------------------- frame makers
def fit(image: object) -> np.ndarray:
    """Centre-crop a PIL image to a square and resize it to the input size, RGB uint8."""
    from PIL import Image

    assert isinstance(image, Image.Image)
    rgb = image.convert("RGB")
    w, h = rgb.size
    side = min(w, h)
    left, top = (w - side) // 2, (h - side) // 2
    square = rgb.crop((left, top, left + side, top + side))
    return np.asarray(square.resize((INPUT_SIZE, INPUT_SIZE), Image.Resampling.BILINEAR), dtype=np.uint8)


LETTERBOX_FILL = 114  # the grey YOLOv8 pads with in training and in Ultralytics' own inference


def letterbox(image: object) -> np.ndarray:
    """Fit a PIL image into the input square keeping its aspect ratio, centred on grey padding, RGB
    uint8: what YOLOv8 saw in training, so calibration and inference frames should look the same."""
    from PIL import Image

    assert isinstance(image, Image.Image)
    rgb = image.convert("RGB")
    w, h = rgb.size
    scale = INPUT_SIZE / max(w, h)
    new_w, new_h = max(1, round(w * scale)), max(1, round(h * scale))
    canvas = Image.new("RGB", (INPUT_SIZE, INPUT_SIZE), (LETTERBOX_FILL,) * 3)
    canvas.paste(
        rgb.resize((new_w, new_h), Image.Resampling.BILINEAR),
        ((INPUT_SIZE - new_w) // 2, (INPUT_SIZE - new_h) // 2),
    )
    return np.asarray(canvas, dtype=np.uint8)


# Seeded synthetic camera-like frames: the same seed gives the same frame on every machine. Used to
# calibrate the untrained YOLOv8n, in tests, and by the bench as "real frames from a fixed seed".
def synthetic_frame(seed: int, size: int = INPUT_SIZE) -> np.ndarray:
    """A ``size`` x ``size`` x 3 uint8 RGB frame: sky/ground gradients, coloured shapes and sensor noise."""
    rng = np.random.default_rng([0x6E707564, seed])  # namespaced so frame seeds never alias model seeds
    rows = np.linspace(0.0, 1.0, size, dtype=np.float32)[:, None, None]
    cols = np.linspace(0.0, 1.0, size, dtype=np.float32)[None, :, None]

    # Two vertical gradients split at a horizon, with a slight horizontal tilt.
    sky_top, sky_low, ground_top, ground_low = rng.uniform(0, 255, (4, 3)).astype(np.float32)
    horizon = int(rng.uniform(0.3, 0.7) * size)
    img = np.empty((size, size, 3), dtype=np.float32)
    t = rows[:horizon] / max(rows[horizon - 1, 0, 0], 1e-6)
    img[:horizon] = sky_top * (1 - t) + sky_low * t
    t = (rows[horizon:] - rows[horizon, 0, 0]) / max(1.0 - rows[horizon, 0, 0], 1e-6)
    img[horizon:] = ground_top * (1 - t) + ground_low * t
    img += (cols - 0.5) * rng.uniform(-40, 40)

    yy, xx = np.mgrid[0:size, 0:size]
    # Rectangles ("vehicles", "buildings"), some with a shaded face.
    for _ in range(int(rng.integers(3, 9))):
        w, h = (rng.uniform(0.05, 0.35, 2) * size).astype(int)
        x0, y0 = int(rng.integers(0, size - w)), int(rng.integers(0, size - h))
        colour = rng.uniform(0, 255, 3).astype(np.float32)
        shade = rng.uniform(-60, 60) * np.linspace(0, 1, h, dtype=np.float32)[:, None, None]
        img[y0 : y0 + h, x0 : x0 + w] = colour + shade
    # Ellipses ("people", "balls").
    for _ in range(int(rng.integers(1, 5))):
        cx, cy = rng.uniform(0.1, 0.9, 2) * size
        rx, ry = rng.uniform(0.02, 0.15, 2) * size
        y0, y1 = max(int(cy - ry), 0), min(int(cy + ry) + 1, size)
        x0, x1 = max(int(cx - rx), 0), min(int(cx + rx) + 1, size)
        inside = ((xx[y0:y1, x0:x1] - cx) / rx) ** 2 + ((yy[y0:y1, x0:x1] - cy) / ry) ** 2 <= 1.0
        img[y0:y1, x0:x1][inside] = rng.uniform(0, 255, 3).astype(np.float32)

    img += rng.normal(0.0, 6.0, img.shape).astype(np.float32)
    return np.clip(img, 0, 255).astype(np.uint8)
