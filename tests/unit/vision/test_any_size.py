"""JPEG/PNG of any size (bounded) letterboxed to the model's input, and boxes mapped back to the
source image's pixels; raw frames keep their fast path. Checked against a letterbox done by hand."""

from __future__ import annotations

import io
import struct

import numpy as np
import pytest
from PIL import Image

from npudure.proto import inference_pb2 as pb
from npudure.vision import frames
from npudure.vision.frames import FrameError, check_request_for, decode_for_model, letterbox_geometry

SIZES = [(1920, 1080), (1280, 720), (320, 320), (1080, 1920), (1, 1), (641, 3)]


def by_hand(w: int, h: int, size: int) -> tuple[float, int, int, int, int]:
    """ultralytics' letterbox written out: scale, resized size, padding (left, top)."""
    r = size / max(w, h)
    nw, nh = max(1, round(w * r)), max(1, round(h * r))
    return r, nw, nh, (size - nw) // 2, (size - nh) // 2


def picture(w: int, h: int) -> tuple[np.ndarray, tuple[int, int, int, int]]:
    """A grey image with a red rectangle at a known place (in source pixels)."""
    img = np.full((h, w, 3), 60, np.uint8)
    box = (w // 4, h // 4, max(w // 4 + 1, 3 * w // 4), max(h // 4 + 1, 3 * h // 4))
    img[box[1] : box[3], box[0] : box[2]] = (220, 30, 30)
    return img, box


def encode(img: np.ndarray, kind: str) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format=kind, **({"quality": 95} if kind == "JPEG" else {}))
    return buf.getvalue()


@pytest.mark.parametrize("size", [640, 320])
@pytest.mark.parametrize(("w", "h"), SIZES)
@pytest.mark.parametrize("kind", ["PNG", "JPEG"])
def test_letterbox_and_boxes_back_in_source_pixels(kind: str, w: int, h: int, size: int) -> None:
    img, (x1, y1, x2, y2) = picture(w, h)
    encoding = pb.ENCODING_PNG if kind == "PNG" else pb.ENCODING_JPEG
    data = encode(img, kind)
    check_request_for(encoding, data, size)
    model_input, geo = decode_for_model(encoding, data, size)
    assert model_input.shape == (size, size, 3) and model_input.dtype == np.uint8

    r, nw, nh, left, top = by_hand(w, h, size)
    assert (geo.new_w, geo.new_h, geo.pad_x, geo.pad_y) == (nw, nh, left, top)
    assert geo.scale == pytest.approx(r)
    if left:  # the padding is ultralytics' grey
        assert (model_input[:, : left - 1] == frames.LETTERBOX_FILL).all()
    if top:
        assert (model_input[: top - 1] == frames.LETTERBOX_FILL).all()

    # The rectangle as the model sees it, computed by hand, then mapped back by the board.
    sx, sy = nw / w, nh / h
    seen = np.array([[left + x1 * sx, top + y1 * sy, left + x2 * sx, top + y2 * sy, 0.9, 3]], np.float32)
    cx, cy = int((seen[0, 0] + seen[0, 2]) / 2), int((seen[0, 1] + seen[0, 3]) / 2)
    if min(x2 - x1, y2 - y1) * min(sx, sy) >= 4:  # big enough to survive resizing and JPEG
        red = model_input[cy, cx].astype(int)
        assert red[0] > 150 and red[1] < 90, red
    back = geo.to_source(seen)
    np.testing.assert_allclose(back[0, :4], [x1, y1, x2, y2], atol=1e-3 * max(w, h) + 1e-3)
    assert back[0, 4] == pytest.approx(0.9) and back[0, 5] == 3


def test_boxes_are_clipped_to_the_source_image() -> None:
    geo = letterbox_geometry(1920, 1080, 640)  # 640x360 at (0, 140)
    back = geo.to_source(np.array([[-5, 100, 700, 600, 0.5, 0]], np.float32))
    np.testing.assert_allclose(back[0, :4], [0, 0, 1920, 1080])


def test_raw_frames_keep_their_fast_path() -> None:
    raw = np.arange(320 * 320 * 3, dtype=np.uint32).astype(np.uint8).tobytes()
    check_request_for(pb.ENCODING_RAW_RGB, raw, 320)
    image, geo = decode_for_model(pb.ENCODING_RAW_RGB, raw, 320)
    assert geo.identity and image.shape == (320, 320, 3) and not image.flags.writeable  # a view, no copy
    boxes = np.array([[1, 2, 3, 4, 0.5, 1]], np.float32)
    np.testing.assert_array_equal(geo.to_source(boxes), boxes)
    with pytest.raises(FrameError, match=r"needs exactly 307200 \(320x320x3"):
        check_request_for(pb.ENCODING_RAW_RGB, raw[:-1], 320)
    with pytest.raises(FrameError, match="needs exactly 1228800"):
        check_request_for(pb.ENCODING_RAW_RGB, raw, 640)


def _claiming(jpeg: bytes, height: int, width: int) -> bytes:
    """The same JPEG with its SOF header claiming another size (the pixel data is unchanged)."""
    at = next(i for i in range(2, len(jpeg) - 1) if jpeg[i] == 0xFF and jpeg[i + 1] in (0xC0, 0xC1, 0xC2))
    return jpeg[: at + 5] + struct.pack(">HH", height, width) + jpeg[at + 9 :]


@pytest.mark.parametrize(
    ("h", "w", "fragment"),
    [
        (65535, 65535, "far larger than 8192x8192"),
        (100, 9000, "up to 8192 px a side and 40 megapixels"),
        (7000, 7000, "up to 8192 px a side and 40 megapixels"),
    ],
)
def test_oversized_headers_are_refused_before_decoding(h: int, w: int, fragment: str) -> None:
    data = _claiming(encode(picture(64, 64)[0], "JPEG"), h, w)
    check_request_for(pb.ENCODING_JPEG, data, 640)  # the header is read on the worker, not here
    with pytest.raises(FrameError, match=fragment):
        decode_for_model(pb.ENCODING_JPEG, data, 640)


def test_png_and_other_encodings_are_checked_at_the_edge() -> None:
    with pytest.raises(FrameError, match="not a PNG"):
        check_request_for(pb.ENCODING_PNG, b"\xff\xd8 jpeg bytes", 640)
    with pytest.raises(FrameError, match="empty frame"):
        check_request_for(pb.ENCODING_PNG, b"", 640)
    with pytest.raises(FrameError, match="ENCODING_RAW_RGB, ENCODING_JPEG or ENCODING_PNG"):
        check_request_for(77, b"x", 640)
    with pytest.raises(FrameError, match="not a valid PNG"):
        decode_for_model(pb.ENCODING_PNG, frames.PNG_MAGIC + b"garbage", 640)


def test_a_1080p_jpeg_is_letterboxed_to_640x360_and_boxes_map_back_to_its_pixels() -> None:
    """The camera path end to end (DCT-scaled decode to 720x405, bilinear to 640x360, grey bands):
    where the image lands in the model input, to the pixel, and a box found there mapped back to
    the 1920x1080 frame. A shifted, stretched or mis-padded resize fails here, not only a wrong
    ``Letterbox`` arithmetic."""
    img = np.full((1080, 1920, 3), 60, np.uint8)
    x1, y1, x2, y2 = 480, 270, 1440, 810  # a red block, its edges on multiples of 3 source px
    img[y1:y2, x1:x2] = (220, 30, 30)
    img[:, :3] = img[:, -3:] = (30, 30, 220)  # blue edge columns: the image must reach x=0 and x=639
    model_input, geo = decode_for_model(pb.ENCODING_JPEG, encode(img, "JPEG"), 640)

    assert (geo.new_w, geo.new_h, geo.pad_x, geo.pad_y, geo.scale) == (640, 360, 0, 140, 1 / 3)
    assert model_input.shape == (640, 640, 3)
    assert (model_input[:140] == frames.LETTERBOX_FILL).all()  # the grey bands, exactly
    assert (model_input[500:] == frames.LETTERBOX_FILL).all()
    content = model_input[140:500].astype(int)
    assert (np.abs(content[[0, -1]] - 60).max(axis=-1)[:, 10:-10] < 40).all()  # first/last rows: image
    assert content[180, 0, 2] > 150 and content[180, 639, 2] > 150  # both edge columns reach the border

    # The red block's edges in the model input: source edges / 3, offset by the top band.
    red = (content[..., 0] > 140) & (content[..., 1] < 80)
    rows, cols = np.flatnonzero(red.any(axis=1)), np.flatnonzero(red.any(axis=0))
    found = np.array([[cols[0], rows[0] + 140, cols[-1] + 1, rows[-1] + 141, 0.9, 2]], np.float32)
    np.testing.assert_allclose(found[0, :4], [160, 230, 480, 410], atol=1)
    back = geo.to_source(found)
    np.testing.assert_allclose(back[0, :4], [x1, y1, x2, y2], atol=3)  # one model pixel = 3 source px
    assert back[0, 4] == pytest.approx(0.9) and back[0, 5] == 2


def test_a_raw_frame_of_another_size_is_letterboxed_like_a_png() -> None:
    img, (x1, y1, x2, y2) = picture(320, 240)
    png = io.BytesIO()
    Image.fromarray(img).save(png, format="PNG")
    check_request_for(pb.ENCODING_RAW_RGB, img.tobytes(), 640, 320, 240)
    raw, raw_geo = decode_for_model(pb.ENCODING_RAW_RGB, img.tobytes(), 640, None, 320, 240)
    posted, png_geo = decode_for_model(pb.ENCODING_PNG, png.getvalue(), 640)
    assert raw_geo == png_geo and not raw_geo.identity
    np.testing.assert_array_equal(raw, posted)  # the same model input as the same picture posted as PNG
    back = raw_geo.to_source(np.array([[*by_box(raw_geo, x1, y1, x2, y2), 0.9, 0]], np.float32))
    np.testing.assert_allclose(back[0, :4], [x1, y1, x2, y2], atol=1.0)


def by_box(geo: frames.Letterbox, x1: int, y1: int, x2: int, y2: int) -> list[float]:
    """A source box in the model's input pixels (the letterbox applied by hand)."""
    sx, sy = geo.new_w / geo.source_w, geo.new_h / geo.source_h
    return [x1 * sx + geo.pad_x, y1 * sy + geo.pad_y, x2 * sx + geo.pad_x, y2 * sy + geo.pad_y]


@pytest.mark.parametrize(
    ("length", "width", "height", "needle"),
    [
        (320 * 240 * 3 - 1, 320, 240, r"needs exactly 230400"),
        (320 * 3, 320, 0, "set both width and height"),
        (3, 9000, 1, "up to 8192 px a side"),
    ],
)
def test_a_raw_frame_of_another_size_is_checked(length: int, width: int, height: int, needle: str) -> None:
    with pytest.raises(FrameError, match=needle):
        check_request_for(pb.ENCODING_RAW_RGB, bytes(length), 640, width, height)


def test_a_raw_frame_that_says_the_model_size_keeps_the_fast_path() -> None:
    raw = bytes(320 * 320 * 3)
    image, geo = decode_for_model(pb.ENCODING_RAW_RGB, raw, 320, None, 320, 320)
    assert geo.identity and not image.flags.writeable
