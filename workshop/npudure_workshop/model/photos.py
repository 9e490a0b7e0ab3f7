"""Real photographs for INT8 calibration and the simulator check, from a well-kept package's wheel.

scikit-image ships a dozen photographs in ``skimage/data`` (inside the wheel, no download at run time):
the calibration set and the check set default to them, letterboxed as at inference, so quantization
ranges come from real image statistics rather than synthetic shapes. The files are read straight from
the installed distribution (``importlib.metadata``), without importing skimage itself (and its scipy).

The check photos are held out of calibration and are the COCO-like scenes (a person, a cat, a cup, a
motorcycle); calibration uses the others and their mirror images. Four photos are too few frames to
judge a conversion by, so past them and their mirrors the check takes seeded crops of them (a quarter
to nine tenths of the side, anywhere in the photo, every other one mirrored): other scales and
framings of the same scenes. They are still not the user's scenes, and the check says so.
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


def _crop(name: str, rng: np.random.Generator, size: int) -> np.ndarray:
    from PIL import Image, ImageOps

    with Image.open(photo_path(name)) as img:
        rgb = img.convert("RGB")
    w, h = rgb.size
    side = float(rng.uniform(0.25, 0.9))
    cw, ch = max(32, round(w * side)), max(32, round(h * side))
    x, y = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
    crop = rgb.crop((x, y, x + cw, y + ch))
    return letterbox(ImageOps.mirror(crop) if rng.random() < 0.5 else crop, size)


def check_photos(count: int, size: int = INPUT_SIZE) -> list[np.ndarray]:
    """``count`` held-out frames for the simulator check: the four photos, their mirror images, then
    seeded crops of them (the same frames on every machine)."""
    base = [_load(n, size) for n in CHECK]
    frames = (base + [np.ascontiguousarray(f[:, ::-1]) for f in base])[:count]
    rng = np.random.default_rng(44)
    while len(frames) < count:
        frames.append(_crop(CHECK[len(frames) % len(CHECK)], rng, size))
    return frames


__all__ = [
    "CALIBRATION",
    "CHECK",
    "PhotosMissing",
    "calibration_photos",
    "check_photos",
    "photo_path",
    "version",
]
