"""The HTTP API's model names (no server): custom/list lists every served model, the default first
under ``http_api.model_name`` when set; an unknown custom model is 404 naming the served ones."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from npudure.config import HttpApiConfig, SchedulerConfig
from npudure.proto import inference_pb2 as pb
from npudure.scheduler.boards import Board
from npudure.scheduler.http_api import HttpApi, HttpApiError
from npudure.scheduler.metrics import SchedulerMetrics


def _api(
    model_name: str | None, *placements: tuple[str, ...], classes: dict[str, list[str]] | None = None
) -> HttpApi:
    boards = []
    for i, names in enumerate(placements):
        board = Board(i, f"b{i}", f"127.0.0.1:{50300 + i}", 8)
        board.last_status = pb.NodeStatus(
            models=[
                pb.ModelStatus(name=n, default=j == 0, class_names=(classes or {}).get(n, []))
                for j, n in enumerate(names)
            ]
        )
        boards.append(board)
    config = SchedulerConfig(boards=[{"name": b.name, "address": b.address} for b in boards])
    scheduler = SimpleNamespace(config=config, metrics=SchedulerMetrics(), boards=boards, dispatch=None)
    return HttpApi(scheduler, HttpApiConfig(model_name=model_name))  # type: ignore[arg-type]


async def _listed(api: HttpApi) -> list[str]:
    return json.loads((await api.custom_list(None)).text)["models"]  # type: ignore[arg-type]


async def test_the_list_is_every_served_model_the_default_first() -> None:
    assert await _listed(_api(None, ("general", "plates"), ("faces",))) == ["general", "plates", "faces"]
    assert await _listed(_api(None, ("yolov8n",))) == ["yolov8n"]  # a single-model shelf, as before


async def test_model_name_renames_the_default_in_the_list() -> None:
    assert await _listed(_api("ipcam-general", ("general", "plates"))) == ["ipcam-general", "plates"]


async def test_an_unknown_custom_model_is_404_naming_the_served_ones() -> None:
    api = _api(None, ("general", "plates"))
    request = SimpleNamespace(match_info={"model": "faces"})
    with pytest.raises(HttpApiError) as err:
        await api.custom(request)  # type: ignore[arg-type]
    assert err.value.status == 404 and "this cluster serves 'general', 'plates'" in str(err.value)


async def _labelmap(api: HttpApi, model: str | None) -> str:
    request = SimpleNamespace(match_info={} if model is None else {"model": model})
    return (await api.labelmap(request)).text  # type: ignore[arg-type]


async def test_the_labelmap_is_each_models_names_as_frigate_reads_them() -> None:
    classes = {"general": ["person", "car"], "plates": ["plate", ""]}
    api = _api("ipcam-general", ("general", "plates"), classes=classes)
    assert await _labelmap(api, None) == "0  person\n1  car\n"
    assert await _labelmap(api, "ipcam-general") == await _labelmap(api, "general") == "0  person\n1  car\n"
    assert await _labelmap(api, "plates") == "0  plate\n1  class1\n"  # an unnamed id as Frigate shows it


async def test_the_labelmap_of_an_unknown_or_unreported_model_is_a_clear_error() -> None:
    api = _api(None, ("general",), ("faces",), classes={"general": ["person"]})
    with pytest.raises(HttpApiError) as err:
        await _labelmap(api, "plates")
    assert err.value.status == 404 and "this cluster serves 'general', 'faces'" in str(err.value)
    with pytest.raises(HttpApiError) as err:
        await _labelmap(api, "faces")  # its board runs an agent that reports no names
    assert err.value.status == 503 and "npudure model labelmap" in str(err.value)
