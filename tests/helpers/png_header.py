"""A PNG that is only its signature and IHDR (then a truncated body): what the decode budget reads
before any decoder runs, for the budget's tests and the abuse benchmark's PNG bomb."""

from __future__ import annotations

import struct
import zlib

from npudure.vision.frames import PNG_MAGIC


def png_header(width: int, height: int, bits: int, colour: int) -> bytes:
    ihdr = struct.pack(">IIBBBBB", width, height, bits, colour, 0, 0, 0)
    chunk = struct.pack(">I", 13) + b"IHDR" + ihdr + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
    return PNG_MAGIC + chunk + b"\x00" * 64
