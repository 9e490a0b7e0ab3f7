"""Fuzzing THROUGH gRPC: a real scheduler and real `sim` agents on loopback get malformed requests.

Every malformed request must come back as the request's fault (INVALID_ARGUMENT or RESOURCE_EXHAUSTED),
never as a board fault: the scheduler must not retry it, no board may leave rotation, and good frames
are still served after the storm. Bounded: a fixed number of examples per strategy, a 10 s timeout each.
"""

from __future__ import annotations

import struct

import grpc
import numpy as np
import pytest
from helpers.loadgen import frame_bytes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from npudure.proto import inference_pb2 as pb
from npudure.proto import inference_pb2_grpc as rpc
from npudure.vision import frames
from npudure_workshop.lab.local import LocalCluster

REQUEST_FAULTS = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED}
INFER = "/npudure.v1.Inference/Infer"
FUZZ = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,  # the same storm on every run: a failure reproduces
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@pytest.fixture(scope="module")
def cluster():
    # Two slow-ish boards: the storm, not the machine, is what is being tested.
    with LocalCluster(boards=2, time_scale=5.0, policy="round_robin") as c:
        yield c


@pytest.fixture(scope="module")
def senders(cluster: LocalCluster):
    """A raw-bytes Infer callable for the scheduler and for one agent directly."""
    options = [("grpc.max_send_message_length", 16 << 20), ("grpc.max_receive_message_length", 16 << 20)]
    channels = {
        "scheduler": grpc.insecure_channel(cluster.address, options=options),
        "agent": grpc.insecure_channel(cluster.agents["board1"].address, options=options),
    }
    yield {
        name: ch.unary_unary(INFER, request_serializer=None, response_deserializer=None)
        for name, ch in channels.items()
    }
    for ch in channels.values():
        ch.close()


def cluster_status(cluster: LocalCluster) -> pb.ClusterStatus:
    with grpc.insecure_channel(cluster.address) as channel:
        return rpc.ClusterStub(channel).GetClusterStatus(pb.ClusterStatusRequest(), timeout=5)


def refused_as_request_fault(send, payload: bytes) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as err:
        send(payload, timeout=10)
    code = err.value.code()
    assert code in REQUEST_FAULTS, f"{code.name}: {err.value.details()}"
    assert err.value.details(), "a refusal says why"
    return code


def good_jpeg() -> bytes:
    image = np.zeros((640, 640, 3), np.uint8)
    image[100:300, 200:500] = (200, 40, 40)
    return frames.encode_jpeg(image)


def with_dimensions(jpeg: bytes, height: int, width: int) -> bytes:
    """The same JPEG with its SOF header claiming another size (the pixel data is unchanged)."""
    at = next(i for i in range(2, len(jpeg) - 1) if jpeg[i] == 0xFF and jpeg[i + 1] in (0xC0, 0xC1, 0xC2))
    return jpeg[: at + 5] + struct.pack(">HH", height, width) + jpeg[at + 9 :]


JPEG = good_jpeg()
RAW = pb.InferRequest(
    request_id="fuzz", encoding=pb.ENCODING_RAW_RGB, frame=frame_bytes()
).SerializeToString()
# The frame is the last field: any cut before the end leaves an invalid message or a short frame.
FRAME_END = len(RAW)
via = pytest.mark.parametrize("target", ["scheduler", "agent"])


@via
@FUZZ
@given(payload=st.binary(max_size=2048))
def test_arbitrary_bytes(senders, target: str, payload: bytes) -> None:
    refused_as_request_fault(senders[target], payload)


@via
@FUZZ
@given(cut=st.integers(0, FRAME_END - 1))
def test_truncated_requests(senders, target: str, cut: int) -> None:
    refused_as_request_fault(senders[target], RAW[:cut])


@via
@FUZZ
@given(
    encoding=st.sampled_from([pb.ENCODING_RAW_RGB, pb.ENCODING_JPEG, pb.ENCODING_UNSPECIFIED, 3, 77]),
    size=st.sampled_from([0, 1, 640 * 640 * 3 - 1, 640 * 640 * 3 + 1, 640 * 480 * 3]),
)
def test_wrong_frames_in_valid_requests(senders, target: str, encoding: int, size: int) -> None:
    request = pb.InferRequest(encoding=encoding, frame=b"\xff\xd8" + b"\x11" * max(0, size - 2))
    refused_as_request_fault(senders[target], request.SerializeToString())


@via
@FUZZ
@given(height=st.integers(0, 65535), width=st.integers(0, 65535))
def test_jpeg_headers_claiming_other_sizes(senders, target: str, height: int, width: int) -> None:
    """Beyond the board's bound (8192 px a side, 40 MP) refused before decoding; within it the pixel data
    no longer fits the header: served if it still decodes, else refused as the request's fault."""
    request = pb.InferRequest(encoding=pb.ENCODING_JPEG, frame=with_dimensions(JPEG, height, width))
    if height > 8192 or width > 8192 or height * width > 40_000_000:
        refused_as_request_fault(senders[target], request.SerializeToString())
        return
    try:
        reply = pb.InferResponse.FromString(senders[target](request.SerializeToString(), timeout=10))
        assert reply.node.startswith("board")
    except grpc.RpcError as exc:
        assert exc.code() in REQUEST_FAULTS, f"{exc.code().name}: {exc.details()}"


@via
@FUZZ
@given(data=st.data())
def test_jpeg_with_mutated_header_bytes(senders, target: str, data: st.DataObject) -> None:
    """Random bytes overwritten in the JPEG's first 600 bytes: served if it still decodes, else refused as
    the request's fault — never a board fault."""
    frame = bytearray(JPEG)
    for _ in range(data.draw(st.integers(1, 8))):
        frame[data.draw(st.integers(2, 600))] = data.draw(st.integers(0, 255))
    request = pb.InferRequest(encoding=pb.ENCODING_JPEG, frame=bytes(frame)).SerializeToString()
    try:
        reply = pb.InferResponse.FromString(senders[target](request, timeout=10))
        assert reply.node.startswith("board")
    except grpc.RpcError as exc:
        assert exc.code() in REQUEST_FAULTS, f"{exc.code().name}: {exc.details()}"


def test_bomb_is_refused_repeatedly(senders) -> None:
    bomb = pb.InferRequest(encoding=pb.ENCODING_JPEG, frame=with_dimensions(JPEG, 65535, 65535))
    for _ in range(10):
        for send in senders.values():
            code = refused_as_request_fault(send, bomb.SerializeToString())
            assert code == grpc.StatusCode.INVALID_ARGUMENT


def test_after_the_storm_every_board_is_up_and_serving(cluster: LocalCluster, senders) -> None:
    # Runs last in this module (pytest keeps file order): the storm above has been sent by now.
    status = cluster_status(cluster)
    assert [pb.BoardState.Name(b.state) for b in status.boards] == ["BOARD_STATE_UP"] * 2
    assert all(b.failures_total == 0 for b in status.boards), [b.failures_total for b in status.boards]
    assert status.retries_total == 0, "a request fault was retried on another board"
    for _ in range(4):
        reply = pb.InferResponse.FromString(senders["scheduler"](RAW, timeout=10))
        assert reply.node.startswith("board") and reply.attempts == 1
