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


def _api(model_name: str | None, *placements: tuple[str, ...]) -> HttpApi:
    boards = []
    for i, names in enumerate(placements):
        board = Board(i, f"b{i}", f"127.0.0.1:{50300 + i}", 8)
        board.last_status = pb.NodeStatus(
            models=[pb.ModelStatus(name=n, default=j == 0) for j, n in enumerate(names)]
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
