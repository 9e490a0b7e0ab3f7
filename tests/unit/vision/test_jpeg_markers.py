"""The one JPEG marker walk (the decode budget's scan count and the HTTP API's header sniff both use it):
every marker of a real JPEG in order, and on truncated or malformed bytes a quiet end or ``Malformed``,
never a read past the end."""

from __future__ import annotations

import pytest
from helpers import jpeg_bombs

from npudure.vision import decode_budget
from npudure.vision.jpeg_markers import EOI, SOS, Malformed, segments


def test_a_progressive_jpeg_walks_from_its_tables_through_every_scan_to_eoi() -> None:
    jpeg = jpeg_bombs.progressive()
    walked = list(segments(jpeg))
    markers = [s.marker for s in walked]
    assert markers[0] == 0xE0 and markers[-1] == EOI  # APP0 (JFIF) first, EOI last
    assert markers.count(SOS) == 10 and 0xC2 in markers  # libjpeg's colour script; SOF2
    for segment in walked:
        assert jpeg[segment.at] == 0xFF and jpeg[segment.at + 1] == segment.marker
        if segment.length:
            assert int.from_bytes(jpeg[segment.at + 2 : segment.at + 4], "big") == segment.length


def test_every_truncation_ends_quietly_inside_the_bytes() -> None:
    jpeg = jpeg_bombs.progressive(size=64)
    whole = list(segments(jpeg))
    for cut in range(len(jpeg)):
        walked = list(segments(jpeg[:cut]))  # raises nothing: a cut JPEG is only shorter
        assert walked == whole[: len(walked)], cut
        assert all(s.at + 4 <= cut for s in walked if s.length), cut  # no length field read past the cut
        assert decode_budget.count_scans(jpeg[:cut]) == sum(s.marker == SOS for s in walked)


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (b"\xff\xd8\x00\x00\x00\x00", "no marker"),  # garbage where a marker must be
        (b"\xff\xd8\xff\xe0\x00\x01JFIF", "length < 2"),
        (b"\xff\xd8\xff\xfe\x00\x04ab" + b"\x12\x34", "no marker"),  # a segment that ends in garbage
    ],
)
def test_malformed_structure_raises_and_the_budget_leaves_it_to_the_decoder(
    data: bytes, fragment: str
) -> None:
    with pytest.raises(Malformed, match=fragment):
        list(segments(data))
    assert decode_budget.count_scans(data) == 0


def test_a_flood_of_fill_bytes_is_one_step() -> None:
    data = b"\xff\xd8" + b"\xff" * 1_000_000 + b"\xfe\x00\x02" + b"\xff\xd9"
    assert [(s.marker, s.at) for s in segments(data)] == [(0xFE, 1_000_001), (EOI, 1_000_005)]


def test_entropy_coded_data_after_a_scan_header_is_skipped_to_the_next_marker() -> None:
    scan = b"\xff\xda\x00\x02" + b"\x12\xff\x00\x34\xff\xd0\x56"  # stuffed 0xFF00 and RST0 stay data
    walked = list(segments(b"\xff\xd8" + scan + b"\xff\xd9"))
    assert [s.marker for s in walked] == [SOS, EOI] and walked[1].at == 2 + len(scan)


def test_resync_skips_stray_bytes_to_the_next_marker_as_libjpeg_does() -> None:
    data = b"\xff\xd8\xff\xfe\x00\x02" + b"\x12\xff\x00\x34" + b"\xff\xfe\x00\x02\xff\xd9"
    with pytest.raises(Malformed, match="no marker"):
        list(segments(data))
    assert [(s.marker, s.at) for s in segments(data, resync=True)] == [(0xFE, 2), (0xFE, 10), (EOI, 14)]
    assert list(segments(b"\xff\xd8\x12\x34\xff\x00", resync=True)) == []  # no marker after: the end
