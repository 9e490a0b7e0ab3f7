"""The agent's letterbox (numpy padding, no PIL canvas, no same-mode copy) gives the pixels of the
PIL-canvas letterbox (``letterbox_with``), for every size, mode and format."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from npudure.proto import inference_pb2 as pb
from npudure.vision.frames import decode_for_model, letterbox_geometry, letterbox_with

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
    with Image.open(io.BytesIO(data)) as image:
        box = letterbox_geometry(w, h, size)
        if fmt == "JPEG" and not box.identity:
            image.draft("RGB", (box.new_w, box.new_h))  # the agent's DCT-domain downscale
        want, _ = letterbox_with(image.convert("RGB"), size)
    assert geometry == box
    assert got.shape == want.shape == (size, size, 3) and got.dtype == np.uint8
    assert np.array_equal(got, want)
