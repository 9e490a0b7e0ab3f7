"""The one letterbox drawer (numpy padding, no PIL canvas, no same-mode copy), in the agent
(``decode_for_model``) and for images already decoded (``letterbox_with``), gives the pixels of a
PIL-canvas letterbox written out here (Pillow's resize pasted on a grey canvas, as ultralytics draws
it) of the same decoded image, for every size, mode and format; and the agent's JPEG decode
(libjpeg-turbo through simplejpeg, DCT-scaled by M/8) stays within a grey level on average of
Pillow's full-resolution decode and letterbox."""

from __future__ import annotations

import io

import numpy as np
import pytest
import simplejpeg
from PIL import Image

from npudure.proto import inference_pb2 as pb
from npudure.vision.frames import (
    LETTERBOX_FILL,
    decode_for_model,
    encode_jpeg,
    letterbox_geometry,
    letterbox_with,
    synthetic_frame,
)


def pil_canvas_letterbox(image: Image.Image, size: int = 640) -> np.ndarray:
    """The reference: resized into ``letterbox_geometry`` and pasted on a grey Pillow canvas."""
    rgb = image.convert("RGB")
    box = letterbox_geometry(*rgb.size, size)
    if box.identity:
        return np.asarray(rgb)
    canvas = Image.new("RGB", (size, size), (LETTERBOX_FILL,) * 3)
    canvas.paste(rgb.resize((box.new_w, box.new_h), Image.Resampling.BILINEAR), (box.pad_x, box.pad_y))
    return np.asarray(canvas)


SIZES = [(640, 640), (1920, 1080), (1080, 1920), (800, 600), (333, 777), (100, 50)]


def _encoded(w: int, h: int, mode: str, fmt: str) -> bytes:
    rng = np.random.default_rng(w * 7 + h)
    image = Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)).convert(mode)
    out = io.BytesIO()
    image.save(out, format=fmt)
    return out.getvalue()


@pytest.mark.parametrize(("w", "h"), SIZES)
@pytest.mark.parametrize(("mode", "fmt"), [("RGB", "JPEG"), ("L", "JPEG"), ("RGB", "PNG"), ("RGBA", "PNG")])
@pytest.mark.parametrize("size", [640, 320])
def test_decode_for_model_matches_the_pil_canvas_letterbox(w, h, mode, fmt, size) -> None:
    data = _encoded(w, h, mode, fmt)
    encoding = pb.ENCODING_JPEG if fmt == "JPEG" else pb.ENCODING_PNG
    got, geometry = decode_for_model(encoding, data, size)
    box = letterbox_geometry(w, h, size)
    if fmt == "JPEG":  # the agent's DCT-domain downscale: the smallest M/8 scale covering the letterbox
        scaled = simplejpeg.decode_jpeg(data, "RGB", min_height=box.new_h, min_width=box.new_w)
        # Resized to the source's letterbox (a scaled image's own letterbox can round 1 px off it).
        resized = Image.fromarray(scaled).resize((box.new_w, box.new_h), Image.Resampling.BILINEAR)
        canvas = Image.new("RGB", (size, size), (114, 114, 114))
        canvas.paste(resized, (box.pad_x, box.pad_y))
        want = np.asarray(scaled if box.identity else canvas)
    else:
        with Image.open(io.BytesIO(data)) as image:
            want = pil_canvas_letterbox(image, size)
            drawn, drawn_box = letterbox_with(image, size)  # the same drawer for a decoded image
        assert drawn_box == box and np.array_equal(drawn, want)
    assert geometry == box
    assert got.shape == want.shape == (size, size, 3) and got.dtype == np.uint8
    assert np.array_equal(got, want)


@pytest.mark.parametrize(("w", "h"), [*SIZES, (1280, 720), (3840, 2160)])
def test_jpeg_decode_is_close_to_pillows_full_resolution_letterbox(w: int, h: int) -> None:
    """Camera-like frames (not noise, whose detail any downscale changes): DCT scaling by M/8 then
    bilinear gives pixels within 1 grey level on average (0.6 measured) of decoding at full size in
    Pillow and resizing there; at 640x640 they are Pillow's exactly."""
    for seed in (1, 2):
        picture = Image.fromarray(synthetic_frame(seed)).resize((w, h), Image.Resampling.BILINEAR)
        data = encode_jpeg(np.asarray(picture))
        got, _ = decode_for_model(pb.ENCODING_JPEG, data)
        with Image.open(io.BytesIO(data)) as image:
            want = pil_canvas_letterbox(image)
        diff = np.abs(got.astype(np.int16) - want)
        if (w, h) == (640, 640):
            assert not diff.any()
        assert diff.mean() < 1.0 and np.percentile(diff, 99) <= 8, (w, h, seed, diff.mean())
