"""The frames a benchmark sends, serialized once into InferRequest bytes and reused for every call.

Serializing a 1.2 MB request per call would make the generator, not the cluster, the bottleneck.
Frames come from a fixed seed (``npudure.vision.frames.synthetic_frame``) or from the user's images,
centre-cropped and resized to 640x640.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from npudure.proto import inference_pb2 as pb
from npudure.vision.frames import FRAME_SHAPE, INPUT_SIZE, synthetic_frame

ENCODINGS = {"raw": pb.ENCODING_RAW_RGB, "jpeg": pb.ENCODING_JPEG}
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp")


class FrameSourceError(Exception):
    """The frames asked for cannot be produced; the message says why and what to do."""


@dataclass(frozen=True)
class FrameSet:
    requests: tuple[bytes, ...]  # serialized InferRequest messages
    frame_bytes: tuple[int, ...]  # payload (frame field) size of each
    encoding: str  # "raw" | "jpeg"
    source: str  # e.g. "synthetic seed 0 (16 frames)" or "images /data (12 files)"

    @property
    def mean_payload_bytes(self) -> float:
        return float(np.mean(self.frame_bytes))

    def conditions(self) -> dict[str, object]:
        return {
            "encoding": self.encoding,
            "frames_distinct": len(self.requests),
            "frame_source": self.source,
            "payload_bytes_mean": round(self.mean_payload_bytes, 1),
            "payload_bytes_min": min(self.frame_bytes),
            "payload_bytes_max": max(self.frame_bytes),
        }


def synthetic_frames(count: int, seed: int, side: int = INPUT_SIZE) -> list[np.ndarray]:
    """``count`` seeded ``side`` x ``side`` RGB frames (``--frame-size``: 32 to 4096 pixels)."""
    if not 32 <= side <= 4096:
        raise FrameSourceError(f"--frame-size {side}: a frame side is 32 to 4096 pixels")
    return [synthetic_frame(seed * 100_003 + i, side) for i in range(count)]


def fit_640(image: object) -> np.ndarray:
    """Centre-crop a PIL image to a square and resize it to 640x640, RGB uint8: the bench's raw frames
    of the user's images (the board letterboxes JPEG/PNG of any size; a raw frame must be 640²)."""
    from PIL import Image

    assert isinstance(image, Image.Image)
    rgb = image.convert("RGB")
    w, h = rgb.size
    side = min(w, h)
    left, top = (w - side) // 2, (h - side) // 2
    square = rgb.crop((left, top, left + side, top + side))
    return np.asarray(square.resize((INPUT_SIZE, INPUT_SIZE), Image.Resampling.BILINEAR), dtype=np.uint8)


def image_frames(directory: str | Path, count: int | None = None) -> list[np.ndarray]:
    from PIL import Image, UnidentifiedImageError

    folder = Path(directory)
    if not folder.is_dir():
        raise FrameSourceError(f"--images {folder}: not a folder; point it at a folder of JPEG/PNG images")
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())
    if not files:
        raise FrameSourceError(
            f"--images {folder}: no images found (looked for {', '.join(IMAGE_SUFFIXES)}); "
            "add some or drop --images to use seeded synthetic frames"
        )
    frames = []
    for path in files[: count or len(files)]:
        try:
            with Image.open(path) as image:
                frames.append(fit_640(image))
        except (UnidentifiedImageError, OSError) as exc:
            raise FrameSourceError(f"--images: cannot read {path}: {exc}") from None
    return frames


def build_frame_set(frames: list[np.ndarray], encoding: str, source: str, jpeg_quality: int = 90) -> FrameSet:
    if encoding not in ENCODINGS:
        raise FrameSourceError(f"encoding {encoding!r} is not supported; use one of: {', '.join(ENCODINGS)}")
    if not frames:
        raise FrameSourceError("no frames to send")
    from npudure.vision.frames import encode_jpeg

    requests, sizes = [], []
    for i, frame in enumerate(frames):
        if frame.ndim != 3 or frame.shape[2] != 3 or frame.dtype != np.uint8:
            raise FrameSourceError(f"frame {i} is {frame.shape} {frame.dtype}; expected H x W x 3 uint8")
        payload = frame.tobytes() if encoding == "raw" else encode_jpeg(frame, jpeg_quality)
        msg = pb.InferRequest(request_id=f"bench-frame-{i}", encoding=ENCODINGS[encoding], frame=payload)
        if encoding == "raw" and frame.shape != FRAME_SHAPE:  # sides for a raw frame not the model's size
            msg.height, msg.width = frame.shape[:2]
        requests.append(msg.SerializeToString())
        sizes.append(len(payload))
    return FrameSet(tuple(requests), tuple(sizes), encoding, source)


def make_frame_set(
    encoding: str = "raw",
    count: int | None = 16,
    seed: int = 0,
    images: str | Path | None = None,
    side: int = INPUT_SIZE,
) -> FrameSet:
    """``count`` distinct frames from ``seed`` (or the first ``count`` images in ``images``, all when None),
    serialized once; synthetic ones ``side`` pixels square (the board letterboxes other sizes)."""
    if images:
        frames = image_frames(images, count)
        return build_frame_set(frames, encoding, f"images {Path(images)} ({len(frames)} files)")
    count = count or 16
    frames = synthetic_frames(count, seed, side)
    size = "" if side == INPUT_SIZE else f" {side}x{side}"
    return build_frame_set(frames, encoding, f"synthetic{size} frames, seed {seed} ({count} frames)")


def parse_mix(text: str) -> list[tuple[str, int]]:
    """``general=3,plates=1`` (or a single ``general``) -> [(model, weight), ...]."""
    mix: list[tuple[str, int]] = []
    for part in text.split(","):
        name, _, weight = part.strip().partition("=")
        try:
            count = int(weight) if weight else 1
        except ValueError:
            count = 0
        if not name or count < 1 or count > 1000:
            raise FrameSourceError(
                f"--mix {text!r}: write MODEL=WEIGHT pairs with whole weights 1-1000, e.g. general=3,plates=1"
            )
        if name in dict(mix):
            raise FrameSourceError(f"--mix {text!r}: model {name!r} is named twice")
        mix.append((name, count))
    return mix


def with_models(frames: FrameSet, mix: list[tuple[str, int]]) -> FrameSet:
    """The frames naming their model (``InferRequest.model``) in the mix's proportions: request k names
    the k-th model of the weighted pattern, over a cycle that holds every frame and the exact ratio."""
    pattern = [name for name, weight in mix for _ in range(weight)]
    n = len(frames.requests)
    length = n * len(pattern) // math.gcd(n, len(pattern))
    requests, sizes = [], []
    for k in range(length):
        request = pb.InferRequest.FromString(frames.requests[k % n])
        request.model = pattern[k % len(pattern)]
        requests.append(request.SerializeToString())
        sizes.append(frames.frame_bytes[k % n])
    named = ", ".join(f"{name} x{weight}" for name, weight in mix)
    return FrameSet(tuple(requests), tuple(sizes), frames.encoding, f"{frames.source}; models {named}")
