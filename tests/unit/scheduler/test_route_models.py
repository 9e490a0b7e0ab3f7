"""The proxyless route carries each model's boards and a target naming only them; a placement change
is a new route version."""

from __future__ import annotations

from npudure.config import SchedulerConfig
from npudure.proto import inference_pb2 as pb
from npudure.scheduler.boards import Board
from npudure.scheduler.route import build_route

RESOLVED = {"b1": "10.0.0.1:50051", "b2": "10.0.0.2:50051", "b3": "10.0.0.3:50051"}


def _status(*models: str) -> pb.NodeStatus:
    return pb.NodeStatus(models=[pb.ModelStatus(name=m, default=i == 0) for i, m in enumerate(models)])


def _boards() -> tuple[list[Board], SchedulerConfig]:
    config = SchedulerConfig(boards=[{"name": n, "address": a} for n, a in RESOLVED.items()])
    boards = [Board(i, b.name, b.address, 8) for i, b in enumerate(config.boards)]
    boards[0].last_status = _status("general", "plates")
    boards[1].last_status = _status("general")
    boards[2].last_status = _status("plates")
    return boards, config


def test_each_model_lists_its_boards_and_a_target_of_them() -> None:
    boards, config = _boards()
    route = build_route(boards, config, RESOLVED)
    assert [(m.name, m.default, list(m.boards), m.target) for m in route.models] == [
        ("general", True, ["b1", "b2"], "ipv4:10.0.0.1:50051,10.0.0.2:50051"),
        ("plates", False, ["b1", "b3"], "ipv4:10.0.0.1:50051,10.0.0.3:50051"),
    ]


def test_a_placement_change_is_a_new_version_and_drained_boards_leave_the_models() -> None:
    boards, config = _boards()
    before = build_route(boards, config, RESOLVED)
    boards[1].last_status = _status("general", "plates")  # b2 now holds plates too
    after = build_route(boards, config, RESOLVED)
    assert after.version != before.version and after.target == before.target
    boards[2].draining = True
    drained = build_route(boards, config, RESOLVED)
    assert [list(m.boards) for m in drained.models] == [["b1", "b2"], ["b1", "b2"]]


def test_boards_that_report_no_models_give_no_model_routes() -> None:
    boards, config = _boards()
    for board in boards:
        board.last_status = None
    assert list(build_route(boards, config, RESOLVED).models) == []
