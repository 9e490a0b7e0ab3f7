"""An InferRequest read straight from the bytes gRPC received, the frame as a view of them.

The agent reads every request with it; the scheduler reads a request's model with it, to route it
(here in proto, which both import: the agent and the scheduler never import each other).

``pb.InferRequest.FromString(data).frame`` copies the 1.2 MB frame out of the message (and the NPU
input copies it again). The message has six small fields, so it is read here in Python: the id, the
encoding, a raw frame's width and height and the model's name are decoded, the frame is a
``memoryview`` of ``data`` (no copy; raw frames then reach the backend as a read-only numpy view, and
the backend's own input copy is the only one). Anything this reader does not expect (an unknown
wire type, a group) goes to protobuf itself, which gives the same answer or the same error; a
truncated or malformed message raises ``DecodeError`` as protobuf does.
"""

from __future__ import annotations

from typing import NamedTuple

from google.protobuf.message import DecodeError

from npudure.proto import inference_pb2 as pb

_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5
_ID, _ENCODING, _FRAME, _WIDTH, _HEIGHT, _MODEL = 1, 2, 3, 4, 5, 6
# The wire type of each known field; a known field sent with another one is left to protobuf.
_WIRE_TYPE = {
    _ID: _LEN,
    _ENCODING: _VARINT,
    _FRAME: _LEN,
    _WIDTH: _VARINT,
    _HEIGHT: _VARINT,
    _MODEL: _LEN,
}


class Request(NamedTuple):
    request_id: str
    encoding: int
    frame: memoryview | bytes
    width: int = 0
    height: int = 0
    model: str = ""


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise DecodeError("truncated or overlong varint")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def _int32(value: int) -> int:
    """An enum's varint as protobuf reads it: the low 32 bits, signed."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def _protobuf(data: bytes) -> Request:
    msg = pb.InferRequest.FromString(data)
    return Request(msg.request_id, msg.encoding, msg.frame, msg.width, msg.height, msg.model)


def parse(data: bytes) -> Request:
    """The request in ``data`` (proto3 rules: the last occurrence of a field wins)."""
    view = memoryview(data)
    texts = {_ID: "", _MODEL: ""}
    encoding = 0
    sides = {_WIDTH: 0, _HEIGHT: 0}
    frame: memoryview | bytes = view[0:0]
    pos, end = 0, len(data)
    while pos < end:
        key, pos = _varint(data, pos)
        number, kind = key >> 3, key & 7
        if number == 0:
            raise DecodeError("field number 0")
        if _WIRE_TYPE.get(number, kind) != kind:
            return _protobuf(data)
        if kind == _VARINT:
            value, pos = _varint(data, pos)
            if number == _ENCODING:
                encoding = _int32(value)
            elif number in sides:
                sides[number] = value & 0xFFFFFFFF  # uint32: protobuf keeps the low 32 bits
        elif kind == _LEN:
            length, pos = _varint(data, pos)
            if pos + length > end:
                raise DecodeError("truncated length-delimited field")
            if number in texts:
                try:
                    texts[number] = bytes(view[pos : pos + length]).decode("utf-8")
                except UnicodeDecodeError:
                    what = "request_id" if number == _ID else "model"
                    raise DecodeError(f"{what} is not valid UTF-8") from None
            elif number == _FRAME:
                frame = view[pos : pos + length]
            pos += length
        elif kind in (_I64, _I32):
            pos += 8 if kind == _I64 else 4
            if pos > end:
                raise DecodeError("truncated fixed-width field")
        else:  # groups and invalid wire types: protobuf's own reading decides
            return _protobuf(data)
    # JPEG and PNG stay views too: the budget's marker walk, simplejpeg and Pillow's BytesIO all read
    # a memoryview, so the copy here (9–21 µs of event-loop CPU per 640/1080p JPEG here) is not needed.
    return Request(texts[_ID], encoding, frame, sides[_WIDTH], sides[_HEIGHT], texts[_MODEL])


def model_field(name: str) -> bytes:
    """``model = name`` as wire bytes: appended to a request, it names the model (the last value of a
    field is the one protobuf keeps), without copying the frame into a new message."""
    data = name.encode()
    length, size = bytearray(), len(data)
    while True:
        byte, size = size & 0x7F, size >> 7
        length.append(byte | (0x80 if size else 0))
        if not size:
            return bytes([_MODEL << 3 | _LEN]) + bytes(length) + data
