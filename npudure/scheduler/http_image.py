"""Posted images for the HTTP API: what can be known from the header, before any board sees the bytes.

The scheduler never decodes a posted image: the board gets the JPEG/PNG bytes as they were posted
(``ENCODING_JPEG``/``ENCODING_PNG``), decodes and letterboxes them itself and answers with boxes in
the posted image's pixels (npudure/vision/frames.py ``decode_for_model``, ``Letterbox.to_source``).
Here only the header is read (a few dozen bytes, microseconds, on the event loop), so that what can
be refused before a board is refused here with the HTTP status the client should get:

* 400 — empty, not a JPEG/PNG, or a header that does not give a size (truncated before it);
* 413 — more pixels or a longer side than this server (``max_image_pixels``) or the boards
  (``frames.MAX_IMAGE_PIXELS``, ``frames.MAX_IMAGE_SIDE``) take, or more bytes than a board message.

What only a decode finds (a corrupt or truncated body after a good header, a JPEG over the decode
budget) the board answers INVALID_ARGUMENT, which the API maps to 400.
"""

from __future__ import annotations

from dataclasses import dataclass

from npudure.proto import inference_pb2 as pb
from npudure.vision import frames, jpeg_markers
from npudure.vision.decode_budget import MAX_SEGMENTS

# What a board decodes: the formats cameras, NVRs and Frigate post.
FORMATS = ("JPEG", "PNG")
# The InferRequest's own bytes around the image (request id, encoding, field tags and lengths).
ENVELOPE_BYTES = 256

# JPEG start-of-frame markers (SOF0..SOF15 but DHT C4, JPG C8 and DAC CC) carry the image's size.
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


class ImageError(Exception):
    """A posted image that cannot be used; ``status`` is the HTTP status the client gets."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class Header:
    format: str  # "JPEG" or "PNG"
    encoding: pb.Encoding  # the InferRequest encoding the board gets
    width: int
    height: int


def sniff(data: bytes, max_pixels: int, max_bytes: int) -> Header:
    """The format and size of a posted image, from its header alone; ImageError for what is refused."""
    if not data:
        raise ImageError("the image is empty (0 bytes): post the image file's bytes as the field 'image'")
    if data[:2] == b"\xff\xd8":
        header = _jpeg(data)
    elif data[:8] == frames.PNG_MAGIC:
        header = _png(data)
    else:
        raise ImageError(
            f"the image could not be decoded: it is not a {' or '.join(FORMATS)} file (post the camera's "
            "JPEG, or a PNG)"
        )
    w, h = header.width, header.height
    if w < 1 or h < 1:
        raise ImageError(f"the image could not be decoded: its {header.format} header says {w}x{h} pixels")
    pixels = min(max_pixels, frames.MAX_IMAGE_PIXELS)
    if w * h > pixels or max(w, h) > frames.MAX_IMAGE_SIDE:
        raise ImageError(
            f"the image is {w}x{h} = {w * h:,} pixels; this server takes at most {pixels:,} pixels and "
            f"{frames.MAX_IMAGE_SIDE} a side: scale it down before posting",
            status=413,
        )
    costly = frames.png_too_costly(data) if header.format == "PNG" else None
    if costly is not None:
        raise ImageError(costly, status=413)
    if len(data) + ENVELOPE_BYTES > max_bytes:
        raise ImageError(
            f"the image file is {len(data):,} bytes; the boards take at most "
            f"{max_bytes - ENVELOPE_BYTES:,} (the scheduler's max_message_bytes): post a smaller or more "
            "compressed image",
            status=413,
        )
    return header


def _jpeg(data: bytes) -> Header:
    """Walk the marker segments from SOI to the first SOFn (bounded like the board's decode budget)."""
    try:
        for step, segment in enumerate(jpeg_markers.segments(data)):
            if step >= MAX_SEGMENTS + 16:
                raise ImageError(
                    f"the image could not be decoded: its JPEG header has more than {MAX_SEGMENTS} marker "
                    "segments before the frame (a camera's has under 20)"
                )
            if segment.marker in _SOF:
                at = segment.at
                if segment.length < 8 or at + 9 > len(data):
                    break
                height = int.from_bytes(data[at + 5 : at + 7], "big")
                width = int.from_bytes(data[at + 7 : at + 9], "big")
                return Header("JPEG", pb.ENCODING_JPEG, width, height)
            if segment.marker == jpeg_markers.SOS:  # a scan before any frame header
                break
    except jpeg_markers.Malformed as exc:
        raise ImageError(f"the image could not be decoded (corrupt JPEG: {exc})") from None
    raise ImageError("the image could not be decoded (corrupt or truncated JPEG: no frame header)")


def _png(data: bytes) -> Header:
    header = frames.png_header(data)
    if header is None:
        raise ImageError("the image could not be decoded (corrupt or truncated PNG: no IHDR header)")
    width, height, _, _ = header
    return Header("PNG", pb.ENCODING_PNG, width, height)
