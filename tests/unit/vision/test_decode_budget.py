"""The decode budget counts scans and marker segments on the bytes, before any pixel is decoded."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
from helpers import jpeg_bombs
from helpers.agent_frames import decode_as_the_agent

from npudure.proto import inference_pb2 as pb
from npudure.vision import decode_budget, frames


def test_standard_jpegs_are_within_the_budget() -> None:
    assert decode_budget.count_scans(jpeg_bombs.progressive()) == 10  # libjpeg's colour script
    baseline = frames.encode_jpeg(np.zeros((640, 640, 3), np.uint8))
    assert decode_budget.count_scans(baseline) == 1
    assert decode_as_the_agent(pb.ENCODING_JPEG, jpeg_bombs.progressive()).shape == frames.FRAME_SHAPE


def test_scan_bytes_inside_a_metadata_segment_are_not_scans() -> None:
    jpeg = jpeg_bombs.progressive()
    payload = b"Exif\x00\x00" + b"\xff\xda" * 1000
    with_app1 = jpeg[:2] + b"\xff\xe1" + (len(payload) + 2).to_bytes(2, "big") + payload + jpeg[2:]
    assert decode_budget.count_scans(with_app1) == 10


@pytest.mark.parametrize(
    ("bomb", "words"),
    [
        (jpeg_bombs.many_scans(decode_budget.MAX_SCANS + 1), "scans"),
        (jpeg_bombs.many_scans(2000), "scans"),
        (jpeg_bombs.many_segments(decode_budget.MAX_SEGMENTS + 1), "marker segments"),
    ],
)
def test_bombs_are_refused_as_invalid_argument(bomb: bytes, words: str) -> None:
    with pytest.raises(frames.FrameError) as err:
        decode_as_the_agent(pb.ENCODING_JPEG, bomb)
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "more than" in str(err.value) and words in str(err.value)


def _stray_byte_after_first_segment(jpeg: bytes) -> bytes:
    end = 4 + int.from_bytes(jpeg[4:6], "big")  # SOI, then the first segment's marker, length and body
    return jpeg[:end] + b"\x00" + jpeg[end:]


@pytest.mark.parametrize(
    ("bomb", "words"),
    [
        (jpeg_bombs.many_scans(2000), "scans"),
        (jpeg_bombs.many_segments(decode_budget.MAX_SEGMENTS + 1), "marker segments"),
    ],
)
def test_a_stray_byte_does_not_hide_a_bomb_behind_it(bomb: bytes, words: str) -> None:
    # libjpeg skips "extraneous bytes before marker" and decodes on, so the budget must walk on too.
    with pytest.raises(frames.FrameError, match=words):
        decode_as_the_agent(pb.ENCODING_JPEG, _stray_byte_after_first_segment(bomb))


def test_a_jpeg_with_a_stray_byte_is_counted_whole_and_refused_as_corrupt() -> None:
    stray = _stray_byte_after_first_segment(jpeg_bombs.progressive())
    assert decode_budget.count_scans(stray) == 10  # the walk goes on past it, as libjpeg reads
    with pytest.raises(frames.FrameError, match="extraneous bytes") as err:  # simplejpeg refuses it
        decode_as_the_agent(pb.ENCODING_JPEG, stray)
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT


def test_at_the_limit_is_still_decoded() -> None:
    jpeg = jpeg_bombs.many_scans(decode_budget.MAX_SCANS)
    assert decode_budget.count_scans(jpeg) == decode_budget.MAX_SCANS
    decode_as_the_agent(pb.ENCODING_JPEG, jpeg)  # repeated refinement scans: libjpeg warns, still decodes


def test_truncated_and_garbage_bytes_are_left_to_the_decoder() -> None:
    jpeg = jpeg_bombs.progressive()
    for cut in (3, 10, 200, len(jpeg) // 2):
        assert decode_budget.count_scans(jpeg[:cut]) <= 10
    assert decode_budget.count_scans(b"\xff\xd8" + bytes(range(256)) * 4) == 0
