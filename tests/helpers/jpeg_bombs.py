"""JPEGs that are small on the wire and costly to decode (for the decode budget's tests and benchmark).

Built from a real progressive JPEG by Pillow: its scans are found by walking the markers, and one is
repeated (more refinement passes over the whole image), or comment segments are inserted (more
marker segments for the parser).
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

from npudure.vision import jpeg_markers


def progressive(seed: int = 1, size: int = 640) -> bytes:
    image = np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(image).save(out, "JPEG", quality=90, progressive=True)
    return out.getvalue()


def scans(jpeg: bytes) -> list[tuple[int, int]]:
    """(start, end) of every scan: its SOS header and entropy-coded data."""
    out: list[tuple[int, int]] = []
    scan_at = None  # the SOS whose data runs up to the next marker
    for segment in jpeg_markers.segments(jpeg):
        if scan_at is not None:
            out.append((scan_at, segment.at))
        scan_at = segment.at if segment.marker == jpeg_markers.SOS else None
    if scan_at is not None:  # no marker after the last scan
        out.append((scan_at, len(jpeg)))
    return out


def many_scans(count: int, seed: int = 1) -> bytes:
    """A valid-looking 640x640 progressive JPEG with ``count`` scans: its smallest scan repeated."""
    jpeg = progressive(seed)
    found = scans(jpeg)
    start, end = min(found, key=lambda scan: scan[1] - scan[0])
    return jpeg[:end] + jpeg[start:end] * max(0, count - len(found)) + jpeg[end:]


def many_segments(count: int, seed: int = 1) -> bytes:
    """The JPEG with ``count`` empty comment segments (FF FE 00 02) after SOI."""
    jpeg = progressive(seed)
    return jpeg[:2] + b"\xff\xfe\x00\x02" * count + jpeg[2:]


def png_with_chunks(count: int) -> bytes:
    """A 640x640 PNG with ``count`` extra text chunks (the agent takes only JPEG and raw frames)."""
    from PIL import PngImagePlugin

    info = PngImagePlugin.PngInfo()
    for i in range(count):
        info.add_text(f"k{i}", "v")
    out = io.BytesIO()
    Image.new("RGB", (640, 640)).save(out, "PNG", pnginfo=info)
    return out.getvalue()


def claiming(jpeg: bytes, height: int, width: int) -> bytes:
    """``jpeg`` with its SOF header claiming another size (the pixel data unchanged)."""
    at = next(i for i in range(2, len(jpeg) - 1) if jpeg[i] == 0xFF and jpeg[i + 1] in (0xC0, 0xC1, 0xC2))
    return jpeg[: at + 5] + height.to_bytes(2, "big") + width.to_bytes(2, "big") + jpeg[at + 9 :]
