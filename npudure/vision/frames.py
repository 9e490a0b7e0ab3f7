"""The one frame module: the model's input size, the request checks, decoding, and the frame makers.

The agent checks a request once at its edge (:func:`check_request_for`, before it waits for anything)
and decodes it on its decode threads (:func:`decode_for_model`): a raw frame of the model's size is
viewed in place; JPEG, PNG and raw frames of other sizes are decoded and letterboxed to the model's
input square, with the :class:`Letterbox` that maps boxes back to the sent image's pixels. Backends
trust the (size, size, 3) uint8 array they get.

There is one letterbox drawer: Pillow's bilinear resize to :func:`letterbox_geometry`, then numpy
padding on YOLOv8's grey (:func:`letterbox_with` gives the same pixels for an image already decoded:
the model builder's calibration photos and ``npudure infer``'s images).
The bench and the model builder make seeded synthetic frames here too (:func:`synthetic_frame`).
"""

from __future__ import annotations

import io
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import grpc
import numpy as np
import simplejpeg

from npudure.proto import inference_pb2 as pb
from npudure.vision import decode_budget, jpeg_markers

if TYPE_CHECKING:
    from PIL import Image

# The model's input: 640x640 RGB, uint8 (YOLOv8n as exported; every backend feeds this).
INPUT_SIZE = 640
FRAME_SHAPE = (INPUT_SIZE, INPUT_SIZE, 3)
FRAME_BYTES = INPUT_SIZE * INPUT_SIZE * 3  # 1,228,800


class FrameError(Exception):
    """A bad frame: carries the gRPC status code the client gets."""

    def __init__(self, message: str, code: grpc.StatusCode = grpc.StatusCode.INVALID_ARGUMENT) -> None:
        super().__init__(message)
        self.code = code


def _within_budget(jpeg: bytes | memoryview) -> None:
    """The decoder's work bounded before any pixel is decoded (scans, marker segments)."""
    try:
        decode_budget.count_scans(jpeg)
    except decode_budget.BudgetError as exc:
        raise FrameError(str(exc)) from None


def _jpeg_size(jpeg: bytes | memoryview) -> tuple[int, int]:
    """(width, height) from the JPEG header alone: no pixel is decoded."""
    try:
        h, w, _, _ = simplejpeg.decode_jpeg_header(jpeg)
    except ValueError as exc:
        claimed = jpeg_markers.claimed_size(jpeg)
        if claimed is not None and _too_big(*claimed):
            raise _too_big_error("JPEG", *claimed) from None
        raise FrameError(f"frame is not a valid JPEG (corrupt or truncated): {exc}") from None
    if w < 1 or h < 1:
        raise FrameError(f"frame is not a valid JPEG: its header claims {w}x{h} pixels")
    return w, h


def _jpeg_pixels(jpeg: bytes | memoryview, min_w: int = 0, min_h: int = 0) -> np.ndarray:
    """libjpeg-turbo (simplejpeg) straight into an (h, w, 3) uint8 RGB array, DCT-scaled by the largest
    M/8 factor that keeps at least ``min_w`` x ``min_h``. Accurate DCT and upsampling (libjpeg's
    defaults, what Pillow used): at full scale the pixels are Pillow's. libjpeg's warnings (a repeated
    refinement scan) are tolerated as they were under Pillow; a premature end (a truncated file) is not."""
    pixels: np.ndarray  # simplejpeg ships no type information
    try:
        pixels = simplejpeg.decode_jpeg(jpeg, "RGB", min_height=min_h, min_width=min_w, strict=True)
        return pixels
    except ValueError as exc:
        if _TRUNCATED in str(exc):
            raise FrameError(f"frame is not a valid JPEG (truncated): {exc}") from None
    try:  # a warning other than truncation: decode as libjpeg does by default, warnings ignored
        pixels = simplejpeg.decode_jpeg(jpeg, "RGB", min_height=min_h, min_width=min_w, strict=False)
        return pixels
    except ValueError as exc:
        raise FrameError(f"frame is not a valid JPEG (corrupt or truncated): {exc}") from None


_TRUNCATED = "Premature end of JPEG file"  # libjpeg's JWRN_JPEG_EOF: the data ran out mid-image


# ---------------------------------------------------------------------- images of any size
# JPEG/PNG of any size up to these bounds are letterboxed on the board to the model's input. 8192 px a
# side covers 8K cameras; 40 MP bounds the decoded RGB buffer at 120 MB per request.
MAX_IMAGE_SIDE = 8192
MAX_IMAGE_PIXELS = 40_000_000
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# What one image may take once decoded: a MAX_IMAGE_PIXELS 8-bit RGB image. A PNG's decoder holds
# pixels x channels x bit depth (a 252 KiB 5760x5760 16-bit RGBA PNG took 267 MiB and 0.9 s of a board),
# so that product is bounded, not the pixels alone; its decode time grows with it.
MAX_DECODED_BYTES = MAX_IMAGE_PIXELS * 3
# PNG colour type -> channels (0 grey, 2 RGB, 3 palette, 4 grey + alpha, 6 RGBA).
_PNG_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}
_PNG_KINDS = {0: "grey", 2: "RGB", 3: "palette", 4: "grey+alpha", 6: "RGBA"}
_FORMATS: dict[int, str] = {pb.ENCODING_JPEG: "JPEG", pb.ENCODING_PNG: "PNG"}


def png_header(data: bytes | memoryview) -> tuple[int, int, int, int] | None:
    """(width, height, bit depth, colour type) from a PNG's IHDR chunk, the first after the signature;
    None when the data is not a PNG or is cut before it."""
    head = bytes(data[:26])
    if len(head) < 26 or head[:8] != PNG_MAGIC or head[12:16] != b"IHDR":
        return None
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big"), head[24], head[25]


def png_decoded_bytes(data: bytes | memoryview) -> int | None:
    """What a PNG's pixels take decoded (width x height x channels x bit depth, from its IHDR chunk);
    None when the header is not there (the decoder then says what is wrong)."""
    header = png_header(data)
    if header is None:
        return None
    width, height, bits, colour = header
    return width * height * max(1, _PNG_CHANNELS.get(colour, 4) * bits // 8)


def png_too_costly(data: bytes | memoryview) -> str | None:
    """Why a PNG would cost more to decode than one image may (one line), else None."""
    decoded = png_decoded_bytes(data)
    if decoded is None or decoded <= MAX_DECODED_BYTES:
        return None
    _, _, bits, colour = png_header(data) or (0, 0, 0, 0)
    return (
        f"the PNG decodes to {decoded / 1e6:.0f} MB ({bits}-bit {_PNG_KINDS.get(colour, '?')}); at most "
        f"{MAX_DECODED_BYTES / 1e6:.0f} MB is decoded per image: save it as an 8-bit RGB PNG or a JPEG, "
        "or scale it down"
    )


def frame_bytes(size: int) -> int:
    return size * size * 3


def check_request_for(
    encoding: int, frame: bytes | memoryview, size: int = INPUT_SIZE, width: int = 0, height: int = 0
) -> None:
    """The cheap checks done before a frame waits for anything (so bad input never takes a slot), for a
    model of input side ``size``: raw frames must be exactly size x size x 3, or width x height x 3
    when the request gives both (bounded like a decoded image); JPEG and PNG may be any size (bounded
    when decoded)."""
    if encoding == pb.ENCODING_RAW_RGB and (width or height):
        _check_raw_sides(len(frame), width, height)
    elif encoding == pb.ENCODING_RAW_RGB:
        if len(frame) != frame_bytes(size):
            raise FrameError(
                f"raw frame has {len(frame)} bytes; ENCODING_RAW_RGB needs exactly {frame_bytes(size)} "
                f"({size}x{size}x3 uint8 RGB, the model's input). Resize to {size}x{size}, or send JPEG/PNG "
                "of any size (the board letterboxes it)"
            )
    elif encoding == pb.ENCODING_PNG:
        if not frame:
            raise FrameError("empty frame: ENCODING_PNG needs the bytes of a PNG file")
        if frame[:8] != PNG_MAGIC:
            raise FrameError("frame is not a PNG (it does not start with the PNG signature 89 50 4E 47)")
    elif encoding == pb.ENCODING_JPEG:
        if not frame:
            raise FrameError("empty frame: ENCODING_JPEG needs the bytes of a JPEG file")
        if frame[:2] != b"\xff\xd8":
            raise FrameError("frame is not a JPEG (it does not start with the JPEG marker FF D8)")
    else:
        name = pb.Encoding.Name(encoding) if encoding in pb.Encoding.values() else str(encoding)
        raise FrameError(
            f"encoding {name} is not supported; set ENCODING_RAW_RGB, ENCODING_JPEG or ENCODING_PNG"
        )


def _too_big(w: int, h: int) -> bool:
    return w > MAX_IMAGE_SIDE or h > MAX_IMAGE_SIDE or w * h > MAX_IMAGE_PIXELS


def _check_raw_sides(length: int, width: int, height: int) -> None:
    if width < 1 or height < 1:
        raise FrameError(
            f"raw frame of {width}x{height}: set both width and height (or neither, for the model's size)"
        )
    if _too_big(width, height):
        raise _too_big_error("raw frame", width, height)
    if length != width * height * 3:
        raise FrameError(
            f"raw frame has {length} bytes; {width}x{height} RGB uint8 needs exactly {width * height * 3}"
        )


def decode_for_model(
    encoding: int,
    frame: bytes | memoryview,
    size: int = INPUT_SIZE,
    marks: list[int] | None = None,
    width: int = 0,
    height: int = 0,
) -> tuple[np.ndarray, Letterbox]:
    """A checked request → the model's size x size x 3 uint8 input and where the image sits in it.

    Raw frames are the fast path (no copy, identity geometry). JPEG/PNG of any size up to
    ``MAX_IMAGE_SIDE`` a side and ``MAX_IMAGE_PIXELS`` are letterboxed; the size is read from the
    header before any pixel is decoded, and a big JPEG is decoded straight at a reduced scale
    (libjpeg-turbo's DCT scaling through simplejpeg: the smallest M/8 that still covers the letterboxed
    size). ``marks``, when given, gets this thread's CPU clock (``time.thread_time_ns``) once the
    pixels are decoded, before the letterbox (the agent's per-stage CPU accounting)."""
    if encoding == pb.ENCODING_RAW_RGB and (width or height) and (width, height) != (size, size):
        return _raw_for_model(frame, width, height, size)
    if encoding == pb.ENCODING_RAW_RGB:
        return np.frombuffer(frame, dtype=np.uint8).reshape(size, size, 3), letterbox_geometry(
            size, size, size
        )
    if _FORMATS.get(encoding, "JPEG") == "JPEG":
        return _jpeg_for_model(frame, size, marks)
    return _png_for_model(frame, size, marks)


def _far_too_big(kind: str) -> FrameError:
    return FrameError(
        f"{kind} header claims an image far larger than {MAX_IMAGE_SIDE}x{MAX_IMAGE_SIDE}: "
        "scale it down before sending"
    )


def _too_big_error(kind: str, w: int, h: int) -> FrameError:
    if w * h > 4 * MAX_IMAGE_PIXELS:  # the wording Pillow's bomb check gave these headers before
        return _far_too_big(kind)
    return FrameError(
        f"{kind} is {w}x{h}; the board takes images up to {MAX_IMAGE_SIDE} px a side and "
        f"{MAX_IMAGE_PIXELS // 1_000_000} megapixels: scale it down before sending"
    )


def _jpeg_for_model(
    frame: bytes | memoryview, size: int, marks: list[int] | None
) -> tuple[np.ndarray, Letterbox]:
    """A JPEG through libjpeg-turbo: decoded at the smallest M/8 scale that still covers the
    letterboxed size (1920x1080 → 720x405 for 640), then Pillow's bilinear resize for the rest."""
    _within_budget(frame)
    w, h = _jpeg_size(frame)
    if _too_big(w, h):
        raise _too_big_error("JPEG", w, h)
    box = letterbox_geometry(w, h, size)
    rgb = _jpeg_pixels(frame, box.new_w, box.new_h)
    if marks is not None:
        marks.append(time.thread_time_ns())
    if box.identity:
        return rgb, box
    if rgb.shape[:2] == (box.new_h, box.new_w):  # the DCT scale landed exactly on the letterbox
        return _pad(rgb, box), box
    from PIL import Image

    return _letterboxed(Image.fromarray(rgb, "RGB"), box), box


def _png_for_model(
    frame: bytes | memoryview, size: int, marks: list[int] | None
) -> tuple[np.ndarray, Letterbox]:
    from PIL import Image

    try:
        costly = png_too_costly(frame)
        if costly is not None:  # from the header, before the decoder holds anything
            raise FrameError(costly)
        with Image.open(io.BytesIO(frame), formats=["PNG"]) as image:
            w, h = image.size
            if _too_big(w, h):
                raise _too_big_error("PNG", w, h)
            box = letterbox_geometry(w, h, size)
            image.load()
            # convert() to the mode the image already has is a full copy: skip it.
            rgb = image if image.mode == "RGB" else image.convert("RGB")
            if marks is not None:
                marks.append(time.thread_time_ns())
            return _letterboxed(rgb, box), box
    except FrameError:
        raise
    except Image.DecompressionBombError:
        raise _far_too_big("PNG") from None
    except Exception as exc:  # any decoder failure is the request's fault, never the board's
        raise FrameError(f"frame is not a valid PNG (corrupt or truncated): {exc}") from None


def _raw_for_model(
    frame: bytes | memoryview, width: int, height: int, size: int
) -> tuple[np.ndarray, Letterbox]:
    """A raw RGB frame of another size than the model's (a Frigate tensor), letterboxed like a JPEG."""
    from PIL import Image

    box = letterbox_geometry(width, height, size)
    pixels = np.frombuffer(frame, dtype=np.uint8).reshape(height, width, 3)
    return _letterboxed(Image.fromarray(pixels, "RGB"), box), box


def _letterboxed(rgb: Image.Image, box: Letterbox) -> np.ndarray:
    """The one letterbox drawer: an RGB Pillow image resized (bilinear) to ``box`` and padded on the
    grey square; an image already of the model's size is its own pixels (no copy)."""
    from PIL import Image

    if box.identity:
        return np.asarray(rgb, dtype=np.uint8)
    return _pad(np.asarray(rgb.resize((box.new_w, box.new_h), Image.Resampling.BILINEAR)), box)


def _pad(scaled: np.ndarray, box: Letterbox) -> np.ndarray:
    """The scaled image on the grey square (numpy: one fill and one copy, where a PIL canvas took a
    fill, a paste and a repack of the whole square)."""
    out = np.full((box.size, box.size, 3), LETTERBOX_FILL, dtype=np.uint8)
    out[box.pad_y : box.pad_y + box.new_h, box.pad_x : box.pad_x + box.new_w] = scaled
    return out


def encode_jpeg(image: np.ndarray, quality: int = 90) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(image), "RGB").save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()


LETTERBOX_FILL = 114  # the grey YOLOv8 pads with in training and in Ultralytics' own inference


@dataclass(frozen=True, slots=True)
class Letterbox:
    """Where a source image sits in the model's input square: scaled by ``scale`` and pasted at
    (``pad_x``, ``pad_y``); :meth:`to_source` maps input-pixel boxes back to the source's pixels."""

    source_w: int
    source_h: int
    size: int  # the model's input side
    scale: float
    pad_x: int
    pad_y: int
    new_w: int
    new_h: int

    @property
    def identity(self) -> bool:
        return self.source_w == self.source_h == self.size

    def to_source(self, boxes: np.ndarray) -> np.ndarray:
        """(N, >=4) rows whose first four columns are x1, y1, x2, y2 in input pixels → a copy with them
        in source pixels, clipped to the source image (the other columns are kept)."""
        out = np.array(boxes, dtype=np.float32, copy=True)
        if self.identity or not len(out):
            return out
        sx, sy = self.new_w / self.source_w, self.new_h / self.source_h  # per axis: rounding of new_w/h
        out[:, [0, 2]] = np.clip((out[:, [0, 2]] - self.pad_x) / sx, 0, self.source_w)
        out[:, [1, 3]] = np.clip((out[:, [1, 3]] - self.pad_y) / sy, 0, self.source_h)
        return out


def letterbox_geometry(width: int, height: int, size: int = INPUT_SIZE) -> Letterbox:
    """The letterbox of a ``width`` x ``height`` image into a ``size`` square (ultralytics' rule:
    scale the longer side to ``size``, centre, pad with grey)."""
    if width < 1 or height < 1:
        raise ValueError(f"an image of {width}x{height} pixels has nothing to letterbox")
    scale = size / max(width, height)
    new_w, new_h = max(1, min(size, round(width * scale))), max(1, min(size, round(height * scale)))
    return Letterbox(width, height, size, scale, (size - new_w) // 2, (size - new_h) // 2, new_w, new_h)


def letterbox_with(image: object, size: int = INPUT_SIZE) -> tuple[np.ndarray, Letterbox]:
    """:func:`letterbox`, with the geometry to map boxes back (no copy when the image is already size²):
    the agent's drawer, so an image letterboxed here is the input the board makes of it."""
    from PIL import Image

    assert isinstance(image, Image.Image)
    # convert() to the mode the image already has is a full copy: skip it.
    rgb = image if image.mode == "RGB" else image.convert("RGB")
    box = letterbox_geometry(*rgb.size, size)
    return _letterboxed(rgb, box), box


def letterbox(image: object, size: int = INPUT_SIZE) -> np.ndarray:
    """Fit a PIL image into the input square keeping its aspect ratio, centred on grey padding, RGB
    uint8: what YOLOv8 saw in training, so calibration and inference frames should look the same."""
    return letterbox_with(image, size)[0]


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
