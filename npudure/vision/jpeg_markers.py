"""One walk over a JPEG's marker segments, without decoding: for the board's decode budget
(npudure/vision/decode_budget.py, which counts scans) and the HTTP API's header sniff
(npudure/scheduler/http_image.py, which reads the frame size).

The walk never reads past the bytes it has: a truncated segment ends it quietly. Where the bytes are not a
marker structure it raises ``Malformed`` (the sniff refuses the image), or, with ``resync``, skips to the
next marker as libjpeg does (it warns of "extraneous bytes before marker" and decodes on): the budget must
see every segment the decoder will, or one stray byte would hide a bomb behind it. Runs of fill bytes and
the entropy-coded data after a scan header are skipped by a regular expression (at C speed), so a flood
of them costs no Python loop.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import NamedTuple

SOI, EOI, SOS = 0xD8, 0xD9, 0xDA
# Markers without a length field (TEM, RSTn, SOI, EOI).
STANDALONE = frozenset({0x01, *range(0xD0, 0xDA)})
# Inside entropy-coded data a marker is 0xFF followed by anything but 0x00 (stuffing), RSTn or 0xFF (fill).
_NEXT_MARKER = re.compile(rb"\xff(?=[^\x00\xd0-\xd7\xff])")
# Fill bytes before a marker: any number of 0xFF; the last one is the marker's own.
_FILL = re.compile(rb"\xff+")
# Where libjpeg's next_marker() lands after stray bytes: a 0xFF followed by anything but 0x00 or 0xFF.
_RESYNC = re.compile(rb"\xff(?=[^\x00\xff])")


class Malformed(ValueError):
    """No marker where one must be, or a segment length under 2 (the message says which)."""


class Segment(NamedTuple):
    marker: int  # the byte after 0xFF
    at: int  # the offset of the marker's 0xFF
    length: int  # the segment's length field (it counts itself); 0 for a standalone marker


def segments(frame: bytes | memoryview, resync: bool = False) -> Iterator[Segment]:
    """Each marker after SOI (from the first byte if there is no SOI) up to and with EOI.

    Bytes where a marker must be raise ``Malformed``; with ``resync`` they are skipped up to the next
    marker (libjpeg's reading), and the walk ends if there is none.

    A segment whose length field is cut off is not yielded; one whose body is cut off is (check
    ``at + 2 + length`` against the size before reading its body). After SOS the walk goes on at the
    next marker after the scan's entropy-coded data, and ends if there is none.
    """
    at = 2 if frame[:2] == b"\xff\xd8" else 0
    end = len(frame)
    while at + 1 < end:
        if frame[at] != 0xFF:
            if not resync:
                raise Malformed("no marker where one must be")
            stray = _RESYNC.search(frame, at)
            if stray is None:
                return
            at = stray.start()
            continue
        marker = frame[at + 1]
        if marker == 0xFF:  # fill bytes before a marker
            fill = _FILL.match(frame, at)
            assert fill is not None  # frame[at] is 0xFF
            at = fill.end() - 1
            continue
        if marker in STANDALONE:
            yield Segment(marker, at, 0)
            if marker == EOI:
                return
            at += 2
            continue
        if at + 4 > end:
            return
        length = int.from_bytes(frame[at + 2 : at + 4], "big")
        if length < 2:
            raise Malformed("a marker segment of length < 2")
        yield Segment(marker, at, length)
        at += 2 + length
        if marker == SOS:
            found = _NEXT_MARKER.search(frame, at)
            if found is None:
                return
            at = found.start()


# Start-of-frame markers (SOF0..SOF15 but DHT C4, JPG C8 and DAC CC) carry the image's size.
SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def claimed_size(frame: bytes | memoryview) -> tuple[int, int] | None:
    """(width, height) from the first SOFn segment, or None if there is none (or it is cut off). For
    headers libjpeg refuses outright (over its 65500 px limit), so the error can name the size."""
    try:
        for segment in segments(frame):
            if segment.marker in SOF:
                at = segment.at
                if at + 9 > len(frame):
                    return None
                return int.from_bytes(frame[at + 7 : at + 9], "big"), int.from_bytes(
                    frame[at + 5 : at + 7], "big"
                )
    except Malformed:
        return None
    return None
