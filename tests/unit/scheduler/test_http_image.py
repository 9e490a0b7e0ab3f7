"""The HTTP API's image path: the letterbox geometry is frames.letterbox's, and boxes map back."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from npudure.scheduler.http_image import ImageError, Letterbox, decode_letterboxed
from npudure.vision.frames import LETTERBOX_FILL, letterbox


def _content_bounds(frame: np.ndarray) -> tuple[int, int, int, int]:
    """left, top, width, height of what is not letterbox grey (the test image has no grey pixel)."""
    content = np.any(frame != LETTERBOX_FILL, axis=2)
    ys, xs = np.nonzero(content)
    return int(xs.min()), int(ys.min()), int(xs.max() - xs.min() + 1), int(ys.max() - ys.min() + 1)


@pytest.mark.parametrize("size", [(320, 320), (1280, 720), (720, 1280), (641, 17), (3, 1000), (1920, 1080)])
def test_geometry_is_the_one_frames_letterbox_uses(size: tuple[int, int]) -> None:
    image = Image.new("RGB", size, (250, 10, 10))
    box = Letterbox.of(*size)
    assert _content_bounds(letterbox(image)) == (box.left, box.top, box.new_w, box.new_h)


def test_boxes_map_back_to_the_posted_pixels_and_are_clipped() -> None:
    box = Letterbox.of(1280, 720)  # scale 0.5, 640x360 at top 140
    mapped = box.to_image(
        np.array([[0, 140, 640, 500], [100, 150, 200, 250], [10, 0, 50, 100]], float), 1280, 720
    )
    assert mapped.tolist() == [[0, 0, 1280, 720], [200, 20, 400, 220], [20, 0, 100, 0]]


def _encode(array: np.ndarray, fmt: str) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format=fmt)
    return buffer.getvalue()


def test_a_big_jpeg_is_decoded_reduced_and_keeps_its_own_size() -> None:
    data = _encode(np.full((2160, 3840, 3), 90, np.uint8), "JPEG")
    decoded = decode_letterboxed(data, 10**8)
    assert (decoded.width, decoded.height) == (3840, 2160)
    assert decoded.frame.shape == (640, 640, 3)
    assert decoded.box.new_w == 640 and decoded.box.new_h == 360
    assert decoded.to_image(np.array([[0.0, 140.0, 640.0, 500.0]])).tolist() == [[0, 0, 3840, 2160]]


@pytest.mark.parametrize(
    ("data", "status", "fragment"),
    [
        (b"", 400, "empty"),
        (b"GIF89a not really", 400, "not a JPEG, PNG"),
        (_encode(np.zeros((64, 64, 3), np.uint8), "JPEG")[:200], 400, "could not be decoded"),
        (_encode(np.zeros((300, 300, 3), np.uint8), "PNG"), 413, "90,000 pixels"),
    ],
)
def test_bad_images_say_why(data: bytes, status: int, fragment: str) -> None:
    with pytest.raises(ImageError) as err:
        decode_letterboxed(data, 1000)
    assert err.value.status == status and fragment in str(err.value)
