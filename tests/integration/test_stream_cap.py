"""Idle streams cannot lock frames out (security round 2, finding 2): health Watch streams beyond the
per-client and per-server stream caps are refused at once, and frames keep the calls the streams may
not take. Against a real agent over real gRPC."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from npudure.proto import inference_pb2 as pb
from npudure.proto import inference_pb2_grpc as rpc
from npudure_workshop.lab.local import LocalCluster

pytestmark = pytest.mark.timeout(120)

# A small server: 10 calls at once in all; streams may hold 4 of them, 3 from one client.
LIMITS = {"max_concurrent_rpcs": 10, "max_streams": 4, "max_streams_per_peer": 3}


@pytest.fixture(scope="module")
def agent_address():
    with LocalCluster(boards=1, time_scale=1.0, agent_overrides={"limits": LIMITS}) as cluster:
        yield next(iter(cluster.agents.values())).address


def _watch(channel: grpc.Channel):
    return health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(service=""), timeout=30)


def _infer(channel: grpc.Channel) -> pb.InferResponse:
    frame = np.zeros((640, 640, 3), np.uint8).tobytes()
    request = pb.InferRequest(frame=frame, encoding=pb.ENCODING_RAW_RGB)
    return rpc.InferenceStub(channel).Infer(request, timeout=10)


def test_a_client_gets_its_streams_up_to_the_cap_and_one_line_beyond(agent_address: str) -> None:
    channels = [grpc.insecure_channel(agent_address) for _ in range(2)]
    streams = []
    try:
        for i in range(3):  # spread over two connections: the cap is per client address
            stream = _watch(channels[i % 2])
            assert next(stream).status == health_pb2.HealthCheckResponse.SERVING
            streams.append(stream)
        refused = _watch(channels[0])
        with pytest.raises(grpc.RpcError) as caught:
            next(refused)
        assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "max_streams_per_peer" in caught.value.details()
        assert "\n" not in caught.value.details()
        # Frames still get through beside the open streams.
        assert _infer(channels[1]).node
    finally:
        for stream in streams:
            stream.cancel()
        for channel in channels:
            channel.close()


def test_closed_streams_give_their_places_back(agent_address: str) -> None:
    for _ in range(3):  # more streams in turn than the cap, each closed before the next
        with grpc.insecure_channel(agent_address) as channel:
            streams = [_watch(channel) for _ in range(3)]
            for stream in streams:
                assert next(stream).status == health_pb2.HealthCheckResponse.SERVING
            for stream in streams:
                stream.cancel()


def test_the_servers_cap_holds_whatever_the_clients_address() -> None:
    limits = {"max_concurrent_rpcs": 10, "max_streams": 3, "max_streams_per_peer": 100}
    with (
        LocalCluster(boards=1, time_scale=1.0, agent_overrides={"limits": limits}) as cluster,
        grpc.insecure_channel(next(iter(cluster.agents.values())).address) as channel,
    ):
        streams = [_watch(channel) for _ in range(3)]
        for stream in streams:
            next(stream)
        with pytest.raises(grpc.RpcError) as caught:
            next(_watch(channel))
        assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "limits.max_streams = 3" in caught.value.details()
        # The 7 calls the streams cannot take stay for frames: 7 at once all answered.
        futures = [
            rpc.InferenceStub(channel).Infer.future(
                pb.InferRequest(frame=bytes(640 * 640 * 3), encoding=pb.ENCODING_RAW_RGB), timeout=20
            )
            for _ in range(7)
        ]
        assert all(f.result().node for f in futures)
        for stream in streams:
            stream.cancel()
