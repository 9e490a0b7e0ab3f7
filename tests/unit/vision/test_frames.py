"""A request's frame through the agent's path (check at the edge, then decode): raw frames are views,
JPEGs decode to RGB, and every refusal says what was expected."""

import grpc
import numpy as np
import pytest
from helpers.agent_frames import decode_as_the_agent

from npudure.proto import inference_pb2 as pb
from npudure.vision import frames


def test_raw_frame_roundtrip_without_copy() -> None:
    image = np.arange(640 * 640 * 3, dtype=np.uint32).astype(np.uint8).reshape(640, 640, 3)
    decoded = decode_as_the_agent(pb.ENCODING_RAW_RGB, image.tobytes())
    assert decoded.shape == (640, 640, 3)
    assert np.array_equal(decoded, image)


def test_jpeg_decodes_to_rgb() -> None:
    image = np.zeros((640, 640, 3), np.uint8)
    image[:, :, 0] = 200
    decoded = decode_as_the_agent(pb.ENCODING_JPEG, frames.encode_jpeg(image))
    assert decoded.shape == (640, 640, 3)
    assert abs(int(decoded[..., 0].mean()) - 200) < 4


@pytest.mark.parametrize(
    ("encoding", "payload", "fragment"),
    [
        (pb.ENCODING_RAW_RGB, b"\0" * 1000, "needs exactly 1228800"),
        (pb.ENCODING_RAW_RGB, b"", "has 0 bytes"),
        (pb.ENCODING_JPEG, b"", "empty frame"),
        (pb.ENCODING_JPEG, b"hello", "not a JPEG"),
        (pb.ENCODING_JPEG, b"\xff\xd8\xff\xe0garbage", "not a valid JPEG"),
        (pb.ENCODING_UNSPECIFIED, b"x", "ENCODING_UNSPECIFIED is not supported"),
        (7, b"x", "encoding 7 is not supported"),
    ],
)
def test_bad_frames_say_what_was_expected(encoding: int, payload: bytes, fragment: str) -> None:
    with pytest.raises(frames.FrameError) as err:
        decode_as_the_agent(encoding, payload)
    assert fragment in str(err.value)
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT


def test_jpeg_of_another_size_is_letterboxed_not_refused() -> None:
    small = frames.encode_jpeg(np.full((160, 320, 3), 200, np.uint8))  # 2:1 -> 640x320 band on grey
    decoded = decode_as_the_agent(pb.ENCODING_JPEG, small)
    assert decoded.shape == frames.FRAME_SHAPE
    assert (decoded[:160] == frames.LETTERBOX_FILL).all() and (decoded[480:] == frames.LETTERBOX_FILL).all()
    assert abs(int(decoded[200:440].mean()) - 200) < 4


def test_letterbox_keeps_the_aspect_ratio_on_yolo_grey() -> None:
    from PIL import Image

    wide = Image.new("RGB", (1280, 640), (255, 0, 0))  # 2:1 -> 640x320 band, 160 px of grey above/below
    out = frames.letterbox(wide)
    assert out.shape == frames.FRAME_SHAPE and out.dtype == np.uint8
    assert (out[:160] == frames.LETTERBOX_FILL).all() and (out[480:] == frames.LETTERBOX_FILL).all()
    assert (out[160:480] == (255, 0, 0)).all()
    tall = frames.letterbox(Image.new("L", (100, 400), 0))  # grey-scale in, RGB out; 160 px band
    assert tall.shape == frames.FRAME_SHAPE
    assert (tall[:, :240] == frames.LETTERBOX_FILL).all() and (tall[:, 240:400] == 0).all()
