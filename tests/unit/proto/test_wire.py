"""The agent's own InferRequest reader gives what protobuf gives, with the frame as a view (no copy)."""

from __future__ import annotations

import random

import numpy as np
import pytest
from google.protobuf.message import DecodeError

from npudure.proto import inference_pb2 as pb
from npudure.proto import wire


def _key(number: int, kind: int) -> bytes:
    return _varint(number << 3 | kind)


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _both(data: bytes) -> tuple[object, object]:
    """(protobuf's reading or its error type, ours or its error type)."""
    try:
        m = pb.InferRequest.FromString(data)
        theirs: object = (m.request_id, m.encoding, m.frame, m.width, m.height, m.model)
    except DecodeError:
        theirs = DecodeError
    try:
        r = wire.parse(data)
        ours: object = (r.request_id, r.encoding, bytes(r.frame), r.width, r.height, r.model)
    except DecodeError:
        ours = DecodeError
    return theirs, ours


def test_a_raw_frame_is_a_view_of_the_received_bytes() -> None:
    frame = np.arange(640 * 640 * 3, dtype=np.uint32).astype(np.uint8).tobytes()
    data = pb.InferRequest(request_id="a", encoding=pb.ENCODING_RAW_RGB, frame=frame).SerializeToString()
    request = wire.parse(data)
    assert isinstance(request.frame, memoryview)
    assert request.frame.obj is data  # no copy: the view is of the received message itself
    assert request.frame == frame and request.request_id == "a"
    assert np.shares_memory(np.frombuffer(request.frame, np.uint8), np.frombuffer(data, np.uint8))


def test_a_jpeg_frame_is_a_view_too() -> None:
    data = pb.InferRequest(encoding=pb.ENCODING_JPEG, frame=b"\xff\xd8xyz").SerializeToString()
    request = wire.parse(data)
    assert request == ("", pb.ENCODING_JPEG, b"\xff\xd8xyz", 0, 0, "")
    assert isinstance(request.frame, memoryview) and request.frame.obj is data  # no copy


def test_random_messages_read_as_protobuf_reads_them() -> None:
    rng = random.Random(20)
    for _ in range(2000):
        parts = []
        for _ in range(rng.randint(0, 6)):
            choice = rng.randint(0, 8)
            if choice in (0, 7):  # the id, or the model's name
                text = "".join(chr(rng.choice([65, 0xE9, 0x4E2D, 0x1F600])) for _ in range(rng.randint(0, 5)))
                raw = text.encode()
                parts.append(_key(1 if choice == 0 else 6, 2) + _varint(len(raw)) + raw)
            elif choice == 1:
                parts.append(_key(2, 0) + _varint(rng.choice([0, 1, 2, 3, 99, -1, 2**31, 2**40])))
            elif choice == 2:
                blob = rng.randbytes(rng.randint(0, 40))
                parts.append(_key(3, 2) + _varint(len(blob)) + blob)
            elif choice == 3:  # unknown fields of every plain wire type
                number = rng.randint(7, 2000)
                kind = rng.choice([0, 1, 2, 5])
                body = {0: _varint(rng.randint(0, 2**20)), 1: rng.randbytes(8), 5: rng.randbytes(4)}.get(kind)
                if body is None:
                    blob = rng.randbytes(rng.randint(0, 9))
                    body = _varint(len(blob)) + blob
                parts.append(_key(number, kind) + body)
            elif choice == 4:  # a known field number with another wire type
                parts.append(_key(rng.randint(1, 6), rng.choice([0, 1, 5])) + rng.randbytes(8))
            elif choice == 5:  # a raw frame's width or height, any varint (uint32 keeps the low bits)
                parts.append(_key(rng.randint(4, 5), 0) + _varint(rng.choice([0, 320, 2**32 + 7, -1])))
            else:  # invalid UTF-8 in the id or the model's name
                parts.append(_key(rng.choice([1, 6]), 2) + b"\x02\xff\xfe")
        data = b"".join(parts)
        theirs, ours = _both(data)
        assert ours == theirs, data
        # Cut anywhere: truncated messages are refused by both (or read alike).
        if data:
            cut = data[: rng.randint(0, len(data) - 1)]
            theirs, ours = _both(cut)
            assert ours == theirs, cut


@pytest.mark.parametrize(
    "data", [b"\x1a\xff\xff\xff\xff\x0f", b"\x80", b"\x00\x01", b"\x1a\x05ab", b"\xff" * 11]
)
def test_malformed_messages_raise_decode_error(data: bytes) -> None:
    with pytest.raises(DecodeError):
        wire.parse(data)


def test_the_model_name_is_read() -> None:
    data = pb.InferRequest(request_id="r", frame=b"x", model="plates").SerializeToString()
    assert wire.parse(data).model == "plates"


def test_a_model_field_appended_names_the_model_without_a_new_message() -> None:
    from npudure.proto.wire import model_field, parse

    frame = bytes(range(256)) * 10
    request = pb.InferRequest(request_id="r", encoding=pb.ENCODING_RAW_RGB, frame=frame, model="general")
    data = request.SerializeToString() + model_field("plates-" + "x" * 200)  # a length of two varint bytes
    assert parse(data).model == pb.InferRequest.FromString(data).model == "plates-" + "x" * 200
    assert bytes(parse(data).frame) == frame
