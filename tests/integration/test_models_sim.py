"""Two emulated models on sim boards (real agents and scheduler on loopback): requests are answered by
boards that hold the model they name, an unknown name is NOT_FOUND with the list, the HTTP API lists
and serves both. The sim ignores model files: a sim model is a name (EMULATED NPU)."""

from __future__ import annotations

import grpc
import pytest
import requests
from helpers.deepstack_requests import jpeg

from npudure.proto import inference_pb2 as pb
from npudure.proto import inference_pb2_grpc as rpc
from npudure.vision.frames import synthetic_frame
from npudure_workshop.lab.local import LocalCluster, free_port

# board1 holds both, board2 only general, board3 only plates (its default).
HOLDERS = {"general": {"board1", "board2"}, "plates": {"board1", "board3"}}


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(
        boards=3,
        models={"general": None, "plates": None},
        contexts=2,
        http_api=True,
        zmq_api=True,
        # Frigate's detector names no model: plates gets an endpoint of its own.
        scheduler_overrides={"zmq_api": {"models": {"plates": free_port()}, "request_timeout_ms": 5000}},
        per_board_overrides={
            "board2": {"models": [{"name": "general"}]},
            "board3": {"models": [{"name": "plates"}]},
        },
    ) as c:
        yield c


def post(url: str, **kwargs) -> requests.Response:
    return requests.post(url, timeout=10, **kwargs)


def _infer(address: str, model: str, i: int = 0) -> pb.InferResponse:
    frame = synthetic_frame(i).tobytes()
    raw = pb.ENCODING_RAW_RGB
    request = pb.InferRequest(request_id=f"{model}-{i}", encoding=raw, frame=frame, model=model)
    with grpc.insecure_channel(address, options=[("grpc.max_send_message_length", 8 << 20)]) as ch:
        return rpc.InferenceStub(ch).Infer(request, timeout=30)


def _status(address: str) -> pb.NodeStatus:
    with grpc.insecure_channel(address) as ch:
        return rpc.NodeStub(ch).GetStatus(pb.NodeStatusRequest(), timeout=10)


def test_each_model_is_answered_only_by_boards_that_hold_it(cluster: LocalCluster) -> None:
    before = {name: _status(p.address).served_total for name, p in cluster.agents.items()}
    nodes: dict[str, set[str]] = {"general": set(), "plates": set()}
    by_node: dict[str, int] = dict.fromkeys(cluster.agents, 0)
    for i in range(24):
        model = "general" if i % 2 else "plates"
        reply = _infer(cluster.address, model, i)
        assert reply.model == model and reply.request_id == f"{model}-{i}"
        nodes[model].add(reply.node)
        by_node[reply.node] += 1
    for model, holders in HOLDERS.items():
        assert nodes[model] <= holders, (model, nodes[model])
    assert nodes["plates"] == HOLDERS["plates"]  # both holders took some: routed, not pinned
    # The boards' own counts agree: board2 served only the general frames sent to it.
    after = {name: _status(p.address).served_total for name, p in cluster.agents.items()}
    assert {n: after[n] - before[n] for n in after} == by_node


def test_a_request_naming_no_model_gets_the_default(cluster: LocalCluster) -> None:
    for i in range(6):
        reply = _infer(cluster.address, "", i)
        assert reply.model == "general" and reply.node in HOLDERS["general"]


def test_an_unknown_model_is_not_found_with_the_list(cluster: LocalCluster) -> None:
    with pytest.raises(grpc.RpcError) as scheduler:
        _infer(cluster.address, "faces")
    assert scheduler.value.code() == grpc.StatusCode.NOT_FOUND
    assert scheduler.value.details() == "no board serves model 'faces'; models served: general, plates"
    # Asked directly, a board names what it serves.
    with pytest.raises(grpc.RpcError) as board:
        _infer(cluster.agents["board2"].address, "plates")
    assert board.value.code() == grpc.StatusCode.NOT_FOUND
    assert "serves general (default general)" in board.value.details()


def test_boards_report_each_models_pool(cluster: LocalCluster) -> None:
    status = _status(cluster.agents["board1"].address)
    assert [(m.name, m.default, m.contexts) for m in status.models] == [
        ("general", True, 2),
        ("plates", False, 2),
    ]
    assert status.contexts == 2  # the old fields describe the default model
    assert [m.name for m in _status(cluster.agents["board3"].address).models] == ["plates"]


def test_http_lists_both_models_and_serves_each_by_name(cluster: LocalCluster) -> None:
    base = cluster.http_url.replace("/v1/vision/detection", "")
    listing = requests.get(f"{base}/v1/vision/custom/list", timeout=5).json()
    assert listing["success"] is True and listing["models"] == ["general", "plates"]
    for model in ("general", "plates"):
        for i in range(4):
            reply = post(f"{base}/v1/vision/custom/{model}", files={"image": jpeg(synthetic_frame(i, 64))})
            assert reply.status_code == 200, reply.text
            assert reply.json()["model"] == model and reply.json()["processedBy"] in HOLDERS[model]
    default = post(cluster.http_url, files={"image": jpeg(synthetic_frame(1, 64))})
    assert default.status_code == 200 and default.json()["model"] == "general"
    missing = post(f"{base}/v1/vision/custom/faces", files={"image": jpeg(synthetic_frame(1, 64))})
    assert missing.status_code == 404 and "'general', 'plates'" in missing.json()["error"]


def test_proxyless_clients_follow_each_models_boards(cluster: LocalCluster) -> None:
    """Straight to the boards (Route.models): a model's frames reach only its holders, and a frame
    naming none reaches the default's holders named so (board3's own default is plates, so sent
    unnamed to board3 it would come back from plates)."""
    import npudure

    with npudure.connect(cluster.address) as client:
        assert dict(client.route.models) and client.route.default_model == "general"
        for model, holders in (("plates", HOLDERS["plates"]), ("", HOLDERS["general"])):
            seen = set()
            for i in range(12):
                frame = synthetic_frame(i).tobytes()
                request = pb.InferRequest(encoding=pb.ENCODING_RAW_RGB, frame=frame, model=model)
                reply = client.infer(request, timeout=30)
                assert reply.model == (model or "general"), (model, reply.node)
                seen.add(reply.node)
            assert seen <= holders, (model, seen)


async def test_the_benchs_proxyless_target_follows_each_models_boards(cluster: LocalCluster) -> None:
    from npudure.client.proxyless import ProxylessTarget

    target = ProxylessTarget(cluster.address, connections=1, from_env=False)
    await target.open()
    try:
        for model, holders in (("plates", HOLDERS["plates"]), ("", HOLDERS["general"])):
            frame = synthetic_frame(3).tobytes()
            payload = pb.InferRequest(
                encoding=pb.ENCODING_RAW_RGB, frame=frame, model=model
            ).SerializeToString()
            for _ in range(8):
                reply = pb.InferResponse.FromString(await target.infer(payload, 30.0))
                assert reply.model == (model or "general") and reply.node in holders, (model, reply.node)
    finally:
        await target.close()


def test_frigate_reaches_each_model_by_its_zmq_endpoint(cluster: LocalCluster) -> None:
    import json

    import zmq

    plates_port = cluster.scheduler_overrides["zmq_api"]["models"]["plates"]
    context = zmq.Context()
    try:
        for endpoint, model in (
            (cluster.zmq_endpoint, "general"),
            (f"tcp://127.0.0.1:{plates_port}", "plates"),
        ):
            socket = context.socket(zmq.REQ)
            socket.setsockopt(zmq.RCVTIMEO, 10_000)
            socket.setsockopt(zmq.LINGER, 0)
            socket.connect(endpoint)
            picture = synthetic_frame(2, 320)
            header = json.dumps({"shape": [320, 320, 3], "dtype": "uint8", "model_type": "yolo-generic"})
            for _ in range(6):
                socket.send_multipart([header.encode(), picture.tobytes()])
                answer = json.loads(socket.recv_multipart()[0])
                assert (answer["code"], answer["model"]) == ("OK", model), answer
                assert answer["node"] in HOLDERS[model]
            socket.close(linger=0)
    finally:
        context.term()
