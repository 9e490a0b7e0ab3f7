"""`npudure bench --api zmq` without a socket: the request header, the frames, and every kind of reply
turned into what the harness collects from gRPC (InferResponse bytes or an AioRpcError)."""

from __future__ import annotations

import json

import grpc
import numpy as np
import pytest

from npudure.proto import inference_pb2 as pb
from npudure.scheduler import zmq_tensor
from npudure_workshop.bench.payloads import FrameSourceError
from npudure_workshop.bench.zmq_load import default_endpoint, outcome, request_header, zmq_frame_set


def test_the_frames_are_square_rgb_tensors_and_the_header_is_frigates() -> None:
    frames = zmq_frame_set(320, count=3, seed=1)
    assert len(frames.requests) == 3 and frames.frame_bytes == (320 * 320 * 3,) * 3
    assert "320x320 uint8 nhwc" in frames.source
    header = json.loads(request_header(frames.requests[0]))
    assert header == {"shape": [1, 320, 320, 3], "dtype": "uint8", "model_type": "yolo-generic"}
    tensor = zmq_tensor.read_request(
        memoryview(request_header(frames.requests[0])), memoryview(frames.requests[0])
    )
    assert (tensor.width, tensor.height) == (320, 320)  # the endpoint reads it back as sent


def test_sizes_outside_what_a_board_takes_are_refused_in_words() -> None:
    with pytest.raises(FrameSourceError, match="32 to 4096"):
        zmq_frame_set(16)
    with pytest.raises(ValueError, match="not a square RGB"):
        request_header(bytes(100))


def test_an_answered_reply_becomes_the_response_with_its_board_and_timing() -> None:
    response = pb.InferResponse(
        node="board1", backend="sim", emulated=True, attempts=1, timing=pb.StageTiming(board_total_us=8000)
    )
    rows = zmq_tensor.reply([], 320, 320)
    parsed = pb.InferResponse.FromString(outcome([zmq_tensor.reply_header("OK", response), rows]))
    assert (parsed.node, parsed.backend, parsed.emulated, parsed.timing.board_total_us) == (
        "board1",
        "sim",
        True,
        8000,
    )


@pytest.mark.parametrize(
    ("frames", "code"),
    [
        (
            [zmq_tensor.reply_header("DEADLINE_EXCEEDED"), zmq_tensor.EMPTY_REPLY],
            grpc.StatusCode.DEADLINE_EXCEEDED,
        ),
        (
            [zmq_tensor.reply_header("RESOURCE_EXHAUSTED"), zmq_tensor.EMPTY_REPLY],
            grpc.StatusCode.RESOURCE_EXHAUSTED,
        ),
        ([b'{"code": "SOMETHING_NEW"}', zmq_tensor.EMPTY_REPLY], grpc.StatusCode.UNKNOWN),
        ([zmq_tensor.EMPTY_REPLY], grpc.StatusCode.UNKNOWN),  # a bare tensor: no outcome to read
        ([b"not json", zmq_tensor.EMPTY_REPLY], grpc.StatusCode.UNKNOWN),
    ],
)
def test_zeros_count_as_the_failure_their_header_names(frames: list[bytes], code: grpc.StatusCode) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        outcome(frames)
    assert info.value.code() == code


def test_the_default_endpoint_is_the_schedulers_host() -> None:
    assert default_endpoint("10.0.0.5:50050") == "tcp://10.0.0.5:5555"
    assert np.frombuffer(zmq_tensor.EMPTY_REPLY, np.float32).size == 120
