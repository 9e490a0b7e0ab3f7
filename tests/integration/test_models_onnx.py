"""Two real ONNX models (ONNX Runtime on the CPU) on one shelf: a request naming each is answered by
a board holding it, with that model's own labels. board1 holds both, board2 only ``plates``."""

from __future__ import annotations

import grpc
import pytest
import requests
from helpers import two_class_model
from helpers.deepstack_requests import jpeg

from npudure.proto import inference_pb2 as pb
from npudure.proto import inference_pb2_grpc as rpc
from npudure.vision.frames import synthetic_frame
from npudure_workshop.lab.local import LocalCluster
from npudure_workshop.model.build import BuildResult, ensure_model

PLATES = ("car", "plate", "truck")
LABELS = {"general": set(two_class_model.NAMES), "plates": set(PLATES)}
HOLDERS = {"general": {"board1"}, "plates": {"board1", "board2"}}


@pytest.fixture(scope="module")
def plates_onnx(tmp_path_factory: pytest.TempPathFactory) -> BuildResult:
    # Same size as the two-class model, other classes and weights: which model answered shows in the labels.
    size = two_class_model.SIZE
    path = tmp_path_factory.mktemp("plates-model") / "plates.onnx"
    return ensure_model("standard", seed=1, nc=len(PLATES), size=size, names=PLATES, path=path)


@pytest.fixture(scope="module")
def cluster(two_class_onnx: BuildResult, plates_onnx: BuildResult):
    with LocalCluster(
        boards=2,
        backend="onnx",
        models={"general": str(two_class_onnx.path), "plates": str(plates_onnx.path)},
        npu_cores=1,
        contexts=1,
        agent_overrides={"onnx_threads": 1},
        per_board_overrides={"board2": {"models": [{"name": "plates", "model": str(plates_onnx.path)}]}},
        http_api=True,
    ) as c:
        yield c


def _infer(address: str, model: str, seed: int) -> pb.InferResponse:
    data = jpeg(synthetic_frame(seed, two_class_model.SIZE))
    with grpc.insecure_channel(address) as ch:
        return rpc.InferenceStub(ch).Infer(
            pb.InferRequest(encoding=pb.ENCODING_JPEG, frame=data, model=model), timeout=60
        )


@pytest.mark.parametrize("model", ["general", "plates"])
def test_each_model_answers_with_its_own_labels_from_a_board_holding_it(cluster, model: str) -> None:
    labels: set[str] = set()
    for seed in range(8):
        reply = _infer(cluster.address, model, seed)
        assert reply.model == model and reply.backend == "onnx" and not reply.emulated
        assert reply.node in HOLDERS[model]
        labels |= {d.label for d in reply.detections}
    assert labels, f"the untrained {model} model found nothing in 8 frames; pick other seeds"
    assert labels <= LABELS[model]


def test_each_board_reports_its_models_hashes(cluster, two_class_onnx, plates_onnx) -> None:
    with grpc.insecure_channel(cluster.agents["board1"].address) as ch:
        status = rpc.NodeStub(ch).GetStatus(pb.NodeStatusRequest(), timeout=10)
    assert [(m.name, m.model_sha256, m.classes) for m in status.models] == [
        ("general", two_class_onnx.sha256, 2),
        ("plates", plates_onnx.sha256, 3),
    ]
    assert status.model_sha256 == two_class_onnx.sha256  # the old field: the default model


def test_http_custom_model_gets_that_models_labels(cluster) -> None:
    base = cluster.http_url.replace("/v1/vision/detection", "")
    assert requests.get(f"{base}/v1/vision/custom/list", timeout=5).json()["models"] == ["general", "plates"]
    for model in ("general", "plates"):
        labels: set[str] = set()
        for seed in range(4):
            reply = requests.post(
                f"{base}/v1/vision/custom/{model}",
                files={"image": jpeg(synthetic_frame(seed, two_class_model.SIZE))},
                data={"min_confidence": "0"},
                timeout=60,
            )
            assert reply.status_code == 200, reply.text
            assert reply.json()["model"] == model
            labels |= {p["label"] for p in reply.json()["predictions"]}
        assert labels and labels <= LABELS[model]


def test_http_labelmap_is_each_models_names_from_its_boards(cluster) -> None:
    """Frigate's labelmap_path, fetched from the scheduler: the names the boards answer with."""
    base = cluster.http_url.replace("/v1/vision/detection", "")
    for model in ("general", "plates"):
        reply = requests.get(f"{base}/v1/vision/labelmap/{model}", timeout=5)
        assert reply.status_code == 200, reply.text
        lines = reply.text.splitlines()
        assert [line.split("  ")[0] for line in lines] == [str(i) for i in range(len(lines))]
        assert {line.split("  ", 1)[1] for line in lines} == LABELS[model]
    assert (
        requests.get(f"{base}/v1/vision/labelmap", timeout=5).text
        == requests.get(f"{base}/v1/vision/labelmap/general", timeout=5).text
    )
