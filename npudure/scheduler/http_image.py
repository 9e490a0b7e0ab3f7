"""Posted images for the HTTP API: decode any size, letterbox to the model's input, map boxes back.

Runs on the scheduler host (its CPU is faster than the boards'), in a thread of the HTTP API's decode
pool: the boards get a raw frame at the model's input size, their fast path. Boxes come back in input
pixels and are mapped to the posted image's pixels by inverting the letterbox.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np

from npudure.vision.frames import INPUT_SIZE, letterbox

# What DeepStack and CodeProject.AI accept in practice (what cameras, NVRs and people post).
FORMATS = ("JPEG", "PNG", "BMP", "WEBP")


class ImageError(Exception):
    """A posted image that cannot be used; ``status`` is the HTTP status the client gets."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class Letterbox:
    """Where a (width x height) image sits in the input square: scaled to new_w x new_h at (left, top)."""

    width: int
    height: int
    new_w: int
    new_h: int
    left: int
    top: int

    @classmethod
    def of(cls, width: int, height: int, size: int = INPUT_SIZE) -> Letterbox:
        # The geometry of npudure.vision.frames.letterbox (tests/unit/scheduler/test_http_image.py checks
        # it against that function's output, so the two cannot drift apart silently).
        scale = size / max(width, height)
        new_w, new_h = max(1, round(width * scale)), max(1, round(height * scale))
        return cls(width, height, new_w, new_h, (size - new_w) // 2, (size - new_h) // 2)

    def to_image(self, boxes: np.ndarray, width: int, height: int) -> np.ndarray:
        """(N, 4) x1, y1, x2, y2 in input pixels -> the same in the pixels of a ``width`` x ``height``
        image (the posted one; this letterbox may be of a reduced decode of it), clipped to the image."""
        sx, sy = width / self.new_w, height / self.new_h
        out = np.empty_like(boxes, dtype=np.float64)
        out[:, 0::2] = (boxes[:, 0::2] - self.left) * sx
        out[:, 1::2] = (boxes[:, 1::2] - self.top) * sy
        np.clip(out[:, 0::2], 0, width, out=out[:, 0::2])
        np.clip(out[:, 1::2], 0, height, out=out[:, 1::2])
        return out


@dataclass(frozen=True, slots=True)
class Decoded:
    frame: np.ndarray  # (INPUT_SIZE, INPUT_SIZE, 3) uint8 RGB, letterboxed
    width: int  # the posted image's size, in its own pixels
    height: int
    box: Letterbox  # where the (possibly reduced) decode sits in the frame

    def to_image(self, boxes: np.ndarray) -> np.ndarray:
        return self.box.to_image(boxes, self.width, self.height)


def decode_letterboxed(data: bytes, max_pixels: int) -> Decoded:
    """Decode a posted image (header checked before any pixel is decoded) and letterbox it."""
    from PIL import Image, UnidentifiedImageError

    if not data:
        raise ImageError("the image is empty (0 bytes): post the image file's bytes as the field 'image'")
    try:
        with Image.open(io.BytesIO(data), formats=FORMATS) as image:
            width, height = image.size
            if width * height > max_pixels:
                raise ImageError(
                    f"the image is {width}x{height} = {width * height:,} pixels; this server decodes at "
                    f"most {max_pixels:,}: scale it down before posting",
                    status=413,
                )
            if image.format == "JPEG":
                # DCT scaling: a 4K JPEG decodes at 1/2..1/8 straight to about the letterbox's size.
                target = Letterbox.of(width, height)
                image.draft("RGB", (target.new_w, target.new_h))
            box = Letterbox.of(*image.size)
            frame = letterbox(image)
    except ImageError:
        raise
    except UnidentifiedImageError:
        raise ImageError(f"the image could not be decoded: it is not a {', '.join(FORMATS)} file") from None
    except Image.DecompressionBombError:
        raise ImageError(
            f"the image header claims far more than {max_pixels:,} pixels: scale it down before posting",
            status=413,
        ) from None
    except Exception as exc:  # any decoder failure is the request's fault, never the server's
        raise ImageError(f"the image could not be decoded (corrupt or truncated): {exc}") from None
    return Decoded(frame, width, height, box)
