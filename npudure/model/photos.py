"""Real photographs for INT8 calibration and the simulator check, from a well-kept package's wheel.

scikit-image ships a dozen photographs in ``skimage/data`` (inside the wheel, no download at run time):
the calibration set and the check set default to them, letterboxed as at inference, so quantization
ranges come from real image statistics rather than synthetic shapes. The files are read straight from
the installed distribution (``importlib.metadata``), without importing skimage itself (and its scipy).

The check photos are held out of calibration and are the COCO-like scenes (a person, a cat, a cup, a
motorcycle); calibration uses the others and their mirror images.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import numpy as np

from npudure.vision.frames import INPUT_SIZE, letterbox

DISTRIBUTION = "scikit-image"
CALIBRATION = (
    "camera.png",
    "rocket.jpg",
    "motorcycle_right.png",
    "hubble_deep_field.jpg",
    "retina.jpg",
    "grass.png",
    "gravel.png",
    "brick.png",
)
CHECK = ("astronaut.png", "chelsea.png", "coffee.png", "motorcycle_left.png")


class PhotosMissing(RuntimeError):
    """The package that ships the photos is not installed."""


def version() -> str | None:
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None


def photo_path(name: str) -> Path:
    try:
        dist = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise PhotosMissing(
            f"{DISTRIBUTION} is not installed: pip install 'npudure[onnx]' (it ships the photographs), "
            "or pass --images DIR"
        ) from None
    path = Path(str(dist.locate_file(f"skimage/data/{name}")))
    if not path.is_file():
        raise PhotosMissing(f"{DISTRIBUTION} {dist.version} has no skimage/data/{name}; pass --images DIR")
    return path


def _load(name: str, size: int) -> np.ndarray:
    from PIL import Image

    with Image.open(photo_path(name)) as img:
        return letterbox(img, size)


def calibration_photos(count: int, size: int = INPUT_SIZE) -> tuple[list[np.ndarray], str]:
    """Up to ``count`` frames: the calibration photos, then their mirror images; and the set's key."""
    base = [_load(n, size) for n in CALIBRATION]
    frames = (base + [np.ascontiguousarray(f[:, ::-1]) for f in base])[:count]
    key = f"photos:{DISTRIBUTION}-{version()}:{len(frames)}" + ("" if size == INPUT_SIZE else f":{size}")
    return frames, key


def check_photos(count: int, size: int = INPUT_SIZE) -> list[np.ndarray]:
    """Up to ``count`` held-out photos for the simulator check (mirrored copies past the four)."""
    base = [_load(n, size) for n in CHECK]
    return (base + [np.ascontiguousarray(f[:, ::-1]) for f in base])[:count]


__all__ = [
    "CALIBRATION",
    "CHECK",
    "PhotosMissing",
    "calibration_photos",
    "check_photos",
    "photo_path",
    "version",
]
