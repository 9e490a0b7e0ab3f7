"""A PNG's decode is bounded by what it decodes to (pixels x channels x bit depth), read from its
header before the decoder holds anything: the 252 KiB 5760x5760 16-bit RGBA bomb (security round 2,
finding 1) is refused at the scheduler (413) and on the board, and ordinary PNGs still decode."""

from __future__ import annotations

import io

import numpy as np
import pytest
from helpers.png_header import png_header
from PIL import Image

from npudure.proto import inference_pb2 as pb
from npudure.scheduler import http_image
from npudure.vision import frames


@pytest.mark.parametrize(
    ("bits", "colour", "per_pixel"),
    [(8, 2, 3), (16, 6, 8), (8, 6, 4), (16, 0, 2), (1, 0, 1), (8, 3, 1), (16, 4, 4)],
)
def test_decoded_bytes_are_pixels_times_channels_times_depth(bits: int, colour: int, per_pixel: int) -> None:
    assert frames.png_decoded_bytes(png_header(100, 50, bits, colour)) == 100 * 50 * per_pixel


def test_the_bomb_is_refused_on_the_board_before_it_is_decoded() -> None:
    bomb = png_header(5760, 5760, 16, 6)
    with pytest.raises(frames.FrameError) as caught:
        frames.decode_for_model(pb.ENCODING_PNG, bomb)
    message = str(caught.value)
    assert "16-bit RGBA" in message and "265 MB" in message and "8-bit RGB" in message


def test_the_bomb_is_refused_at_the_scheduler_with_413() -> None:
    with pytest.raises(http_image.ImageError) as caught:
        http_image.sniff(png_header(5760, 5760, 16, 6), max_pixels=7680 * 4320, max_bytes=4 << 20)
    assert caught.value.status == 413 and "decodes to 265 MB" in str(caught.value)


def test_the_same_pixels_as_8_bit_rgb_pass_and_big_16_bit_ones_within_the_budget_too() -> None:
    assert frames.png_too_costly(png_header(5760, 5760, 8, 2)) is None  # 99.5 MB
    assert frames.png_too_costly(png_header(3840, 2160, 16, 2)) is None  # a 16-bit 4K RGB, 50 MB
    assert frames.png_too_costly(png_header(3840, 2160, 16, 6)) is None  # 66 MB


def test_an_ordinary_png_still_decodes() -> None:
    buffer = io.BytesIO()
    Image.fromarray(np.full((48, 64, 3), 200, np.uint8)).save(buffer, format="PNG")
    image, _ = frames.decode_for_model(pb.ENCODING_PNG, buffer.getvalue())
    assert image.shape[2] == 3
