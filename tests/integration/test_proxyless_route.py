"""Cluster.GetRoute: what it lists, that grpcio accepts its service config, and the clients built on it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import grpc
import numpy as np
import pytest
from helpers.cli import run_npudure

import npudure
from npudure.client.proxyless import open_aio_channel
from npudure.client.routes import RouteError, RouteInfo, channel_options, fetch_route
from npudure.config import SchedulerConfig
from npudure.proto import inference_pb2 as pb
from npudure.scheduler.boards import Board
from npudure.scheduler.route import build_route, exclusion_reasons, resolve, target_for
from npudure_workshop.lab.local import LocalCluster

FRAME = np.zeros((640, 640, 3), np.uint8).tobytes()


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(boards=2, time_scale=0.2) as c:
        yield c


def _boards() -> tuple[list[Board], SchedulerConfig]:
    config = SchedulerConfig(
        boards=[{"name": f"b{i}", "address": f"10.0.0.{i}:50051"} for i in (1, 2, 3)], request_timeout_s=7
    )
    return [Board(i, b.name, b.address, 8) for i, b in enumerate(config.boards)], config


def test_target_names_every_board_in_rotation_and_the_version_follows() -> None:
    boards, config = _boards()
    resolved = {b.name: resolve(b.address) for b in boards}
    route = build_route(boards, config, resolved)
    assert route.target == "ipv4:10.0.0.1:50051,10.0.0.2:50051,10.0.0.3:50051"
    boards[1].draining = True
    boards[2].active = False
    boards[0].down = True  # down boards stay listed: their health keeps clients away
    smaller = build_route(boards, config, resolved)
    assert [b.name for b in smaller.boards] == ["b1"]
    assert smaller.version != route.version
    assert exclusion_reasons(boards[1]) == ["drained"] and exclusion_reasons(boards[2]) == ["inactive"]
    sc = json.loads(route.service_config_json)
    method = sc["methodConfig"][0]
    assert method["timeout"] == "7s"
    assert "UNAVAILABLE" in method["retryPolicy"]["retryableStatusCodes"]
    assert "weighted_round_robin" in sc["loadBalancingConfig"][0]


def test_ipv6_and_mixed_targets() -> None:
    assert target_for(["[::1]:1"]) == "ipv6:[::1]:1"
    assert target_for(["[::1]:1", "10.0.0.1:2"]) == "ipv6:[::1]:1,[::ffff:10.0.0.1]:2"
    assert resolve("localhost:50051").endswith(":50051")


def test_an_empty_rotation_is_a_clear_error() -> None:
    with pytest.raises(RouteError, match="no board in rotation"):
        RouteInfo.from_proto(pb.Route())


def _call(channel_target: str, route: RouteInfo, service_config: str | None = None) -> pb.InferResponse:
    options = dict(channel_options(route))
    if service_config is not None:
        options["grpc.service_config"] = service_config
    with grpc.insecure_channel(channel_target, options=list(options.items())) as channel:
        call = channel.unary_unary(
            "/npudure.v1.Inference/Infer",
            request_serializer=pb.InferRequest.SerializeToString,
            response_deserializer=pb.InferResponse.FromString,
        )
        return call(pb.InferRequest(encoding=pb.ENCODING_RAW_RGB, frame=FRAME), timeout=10)


def test_grpcio_accepts_the_service_config_from_get_route(cluster: LocalCluster) -> None:
    route = fetch_route(cluster.address)
    assert {name for name, _ in route.boards} == {"board1", "board2"}
    reply = _call(route.target, route)
    assert reply.node in {"board1", "board2"}
    # grpcio does validate service configs: a broken one fails the call, so the line above means
    # the scheduler's was accepted.
    broken = json.loads(route.service_config_json)
    broken["methodConfig"][0]["retryPolicy"]["maxAttempts"] = "many"
    with pytest.raises(grpc.RpcError) as caught:
        _call(route.target, route, json.dumps(broken))
    assert "service config" in (caught.value.details() or "").lower()


async def test_open_aio_channel_serves_from_every_board(cluster: LocalCluster) -> None:
    channel, route = await open_aio_channel(cluster.address)
    try:
        call = channel.unary_unary(
            "/npudure.v1.Inference/Infer",
            request_serializer=pb.InferRequest.SerializeToString,
            response_deserializer=pb.InferResponse.FromString,
        )
        request = pb.InferRequest(encoding=pb.ENCODING_RAW_RGB, frame=FRAME)
        replies = await asyncio.gather(*(call(request, timeout=10) for _ in range(20)))
    finally:
        await channel.close()
    assert route.max_message_bytes >= len(FRAME)
    assert {r.node for r in replies} == {"board1", "board2"}


def test_connect_is_the_documented_entry_point(cluster: LocalCluster) -> None:
    with npudure.connect(cluster.address) as client:
        nodes = {
            client.infer(pb.InferRequest(encoding=pb.ENCODING_RAW_RGB, frame=FRAME), timeout=10).node
            for _ in range(12)
        }
    assert nodes == {"board1", "board2"}


def test_cli_infer_proxyless(cluster: LocalCluster) -> None:
    done = run_npudure("infer", "--proxyless", "--target", cluster.address, "--count", "6")
    assert done.returncode == 0, done.stderr
    assert "proxyless: ipv4:" in done.stdout and "failures: 0" in done.stdout


def test_cli_infer_proxyless_against_an_agent_says_what_is_wrong(cluster: LocalCluster) -> None:
    done = run_npudure("infer", "--proxyless", "--target", cluster.agents["board1"].address)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().count("\n") == 0 and "GetRoute" in done.stderr
