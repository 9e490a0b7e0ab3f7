"""The HTTP API's header sniff: format and size from the header alone, and what is refused before a board."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from npudure.proto import inference_pb2 as pb
from npudure.scheduler.http_image import ENVELOPE_BYTES, ImageError, sniff
from npudure.vision import frames

BIG = 10**9


def _encode(array: np.ndarray, fmt: str, **kwargs) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format=fmt, **kwargs)
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("w", "h", "fmt", "kwargs"),
    [
        (320, 320, "JPEG", {}),
        (1920, 1080, "JPEG", {"progressive": True}),
        (17, 641, "JPEG", {"exif": b"Exif\x00\x00" + bytes(3000)}),  # an APP1 segment before the frame
        (1280, 720, "PNG", {}),
        (1, 1, "PNG", {}),
    ],
)
def test_size_and_format_come_from_the_header_as_pil_reads_them(w: int, h: int, fmt: str, kwargs) -> None:
    data = _encode(np.zeros((h, w, 3), np.uint8), fmt, **kwargs)
    header = sniff(data, BIG, BIG)
    with Image.open(io.BytesIO(data)) as image:
        assert (header.format, header.width, header.height) == (image.format, *image.size)
    assert header.encoding == (pb.ENCODING_JPEG if fmt == "JPEG" else pb.ENCODING_PNG)


def test_only_the_header_is_needed() -> None:
    """A body cut after the header passes here: only the board's decode can find it (INVALID_ARGUMENT)."""
    data = _encode(np.zeros((64, 96, 3), np.uint8), "JPEG")
    header = sniff(data[:700], BIG, BIG)
    assert (header.width, header.height) == (96, 64)


def _jpeg_claiming(width: int, height: int) -> bytes:
    """A JPEG header whose frame claims width x height (no pixel data follows)."""
    sof = b"\xff\xc0\x00\x11\x08" + height.to_bytes(2, "big") + width.to_bytes(2, "big") + bytes(10)
    return b"\xff\xd8" + sof


PNG_HEAD = _encode(np.zeros((2, 2, 3), np.uint8), "PNG")[:33]


@pytest.mark.parametrize(
    ("data", "max_pixels", "max_bytes", "status", "fragment"),
    [
        (b"", BIG, BIG, 400, "empty"),
        (b"GIF89a not really", BIG, BIG, 400, "not a JPEG or PNG"),
        (_encode(np.zeros((8, 8, 3), np.uint8), "BMP"), BIG, BIG, 400, "not a JPEG or PNG"),
        (b"\xff\xd8\xff\xe0\x00\x10JFIF", BIG, BIG, 400, "no frame header"),  # cut before its SOF
        (b"\xff\xd8\x00\x00\x00\x00\x00", BIG, BIG, 400, "no marker"),
        (
            b"\xff\xd8" + b"\xff\xfe\x00\x02" * 400 + _jpeg_claiming(8, 8)[2:],
            BIG,
            BIG,
            400,
            "marker segments",
        ),
        (PNG_HEAD[:20], BIG, BIG, 400, "IHDR"),
        (_jpeg_claiming(0, 100), BIG, BIG, 400, "0x100"),
        (_jpeg_claiming(300, 300), 1000, BIG, 413, "90,000 pixels"),
        (_jpeg_claiming(frames.MAX_IMAGE_SIDE + 1, 8), BIG, BIG, 413, "a side"),
        (_jpeg_claiming(8000, 8000), BIG, BIG, 413, f"{frames.MAX_IMAGE_PIXELS:,} pixels"),
        (PNG_HEAD + bytes(1000), BIG, 1000 + ENVELOPE_BYTES, 413, "max_message_bytes"),
    ],
    ids=[
        "empty",
        "gif",
        "bmp",
        "jpeg-cut-in-header",
        "jpeg-no-marker",
        "jpeg-segment-flood",
        "png-cut",
        "zero-width",
        "over-max_image_pixels",
        "over-the-boards-side",
        "over-the-boards-pixels",
        "over-a-board-message",
    ],
)
def test_what_is_refused_before_a_board_says_why(
    data: bytes, max_pixels: int, max_bytes: int, status: int, fragment: str
) -> None:
    with pytest.raises(ImageError) as err:
        sniff(data, max_pixels, max_bytes)
    assert err.value.status == status and fragment in str(err.value), str(err.value)


def test_a_message_just_within_the_board_limit_passes() -> None:
    data = PNG_HEAD + bytes(1000)
    assert sniff(data, BIG, len(data) + ENVELOPE_BYTES).format == "PNG"


def test_a_jpeg_cut_anywhere_gives_its_size_or_a_400() -> None:
    """Through the shared marker walk (npudure/vision/jpeg_markers.py): never another exception."""
    data = _encode(np.zeros((48, 80, 3), np.uint8), "JPEG", progressive=True)
    sizes = set()
    for cut in range(2, len(data)):
        try:
            header = sniff(data[:cut], BIG, BIG)
        except ImageError as err:
            assert err.status == 400 and "could not be decoded" in str(err), (cut, str(err))
        else:
            sizes.add((header.width, header.height))
    assert sizes == {(80, 48)}
