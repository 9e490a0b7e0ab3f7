"""Calibration and the simulator check default to real photographs shipped in scikit-image's wheel,
letterboxed as at inference; the check photos are held out of calibration."""

from __future__ import annotations

import numpy as np
import pytest

from npudure.vision.frames import LETTERBOX_FILL
from npudure_workshop.model import photos
from npudure_workshop.model.convert import calibration_set, check_set

pytestmark = pytest.mark.skipif(
    photos.version() is None, reason="scikit-image (npudure[onnx]) is not installed"
)


@pytest.mark.parametrize("size", [640, 320])
def test_defaults_are_real_photos_letterboxed(size: int) -> None:
    calib, key = calibration_set(None, 20, size)
    assert key.startswith(f"photos:scikit-image-{photos.version()}:16")
    assert len(calib) == 16 and all(f.shape == (size, size, 3) and f.dtype == np.uint8 for f in calib)
    check = check_set(None, 4, size)
    assert check.shape == (4, size, size, 3)
    # chelsea.png is 451x300: letterboxed, so grey bands above and below, the cat in between.
    chelsea = check[1]
    assert (chelsea[:5] == LETTERBOX_FILL).all() and (chelsea[-5:] == LETTERBOX_FILL).all()
    assert chelsea[size // 2].std() > 10  # photo content, not padding
    # Held out: no check photo is a calibration frame.
    assert not any(np.array_equal(c, f) for c in check for f in calib)


def test_mirrored_copies_fill_the_calibration_set() -> None:
    calib, _ = calibration_set(None, 10)
    np.testing.assert_array_equal(calib[8], calib[0][:, ::-1])


def test_missing_package_is_named(monkeypatch) -> None:
    monkeypatch.setattr(photos, "DISTRIBUTION", "no-such-distribution-npudure")
    with pytest.raises(photos.PhotosMissing, match="pip install 'npudure\\[onnx\\]'"):
        photos.photo_path("astronaut.png")
