"""The work a JPEG asks of the decoder, bounded before any pixel is decoded.

The agent already refuses a JPEG whose header is not 640x640. That bounds the pixels, not the work:
a progressive JPEG is a series of scans, and each scan is one more pass over every block, whatever
its size on the wire (an end-of-band run codes thousands of blocks in a few bytes). A few hundred KB
of cheap refinement scans cost the decoder seconds. Marker segments (APPn, COM, ...) are parsed one by
one in Python by Pillow, so a body made of a million tiny segments costs seconds too.

The budget is counted on the bytes, in one pass at C speed (no decoding), and what exceeds it is the
request's fault (INVALID_ARGUMENT):
- at most ``MAX_SCANS`` scans: libjpeg's standard progressive script has 10 for colour images (14
  for CMYK), and scan-optimising encoders (mozjpeg, jpegtran -optimize) stay under 32. Measured on
  an x86 core: a 640x640 scan costs up to ~7 ms (the refinement scans of noise), so 32 scans bound a
  decode near 0.2 s, where 500 scans took 4.6 s (``benchmarks/abuse.py`` prints it);
- at most ``MAX_SEGMENTS`` other marker segments (a camera JPEG has under 20).
A wall-time budget was not chosen: Pillow's decoder cannot be interrupted mid-image, so a time limit
could only be enforced after the cost was paid; counting scans refuses the bomb before it is decoded.
"""

from __future__ import annotations

from npudure.vision import jpeg_markers

MAX_SCANS = 32
MAX_SEGMENTS = 256


class BudgetError(ValueError):
    """The JPEG asks for more decoder work than the budget allows (worded for the client)."""


def count_scans(
    frame: bytes | memoryview, max_scans: int = MAX_SCANS, max_segments: int = MAX_SEGMENTS
) -> int:
    """The number of scans in ``frame``; raise BudgetError past either limit. Stray bytes between segments
    are skipped as the decoder skips them; other malformed structure is left to the decoder (it refuses
    it): this only counts."""
    scans = segments = 0
    try:
        for segment in jpeg_markers.segments(frame, resync=True):
            if segment.marker == jpeg_markers.SOS:
                scans += 1
                if scans > max_scans:
                    raise BudgetError(
                        f"JPEG has more than {max_scans} scans (progressive refinement passes); each scan "
                        "is one more decode pass over the whole image: re-encode it with a standard "
                        "encoder (baseline, or progressive with its default scan script)"
                    )
            elif segment.length:
                segments += 1
                if segments > max_segments:
                    raise BudgetError(
                        f"JPEG has more than {max_segments} marker segments (APPn/COM/tables): strip the "
                        "metadata before sending"
                    )
    except jpeg_markers.Malformed:
        pass  # not a JPEG's structure from here on: the decoder will say it is corrupt
    return scans
