"""RouteTable: which route is followed, when channels are replaced and when the old ones are closed."""

from __future__ import annotations

from npudure.client.routes import RouteError, RouteInfo, RouteTable
from npudure.proto import inference_pb2 as pb


def _route(version: str, *boards: str) -> RouteInfo:
    return RouteInfo(
        target="ipv4:" + ",".join(f"10.0.0.{i}:50051" for i, _ in enumerate(boards)),
        service_config_json="{}",
        boards=tuple((b, f"10.0.0.{i}:50051") for i, b in enumerate(boards)),
        version=version,
        tls=False,
        max_message_bytes=4 << 20,
        refresh_interval_s=0.5,
    )


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _table(clock: Clock, follow: bool = True) -> tuple[RouteTable[str], list[str]]:
    opened: list[str] = []

    def open_channels(route: RouteInfo) -> list[str]:
        names = [f"{route.version}/{n}" for n in range(2)]
        opened.extend(names)
        return names

    return RouteTable(open_channels, follow=follow, retire_after_s=30.0, clock=clock), opened


def test_first_route_installs_and_the_same_version_changes_nothing() -> None:
    table, opened = _table(Clock())
    assert table.refresh_interval_s == 1.0  # before any route
    assert table.offer(_route("v1", "a", "b"))
    assert table.channels == ["v1/0", "v1/1"] and table.changes == 0
    assert table.refresh_interval_s == 0.5
    assert not table.offer(_route("v1", "a", "b"))
    assert opened == ["v1/0", "v1/1"] and table.due() == []


def test_a_new_version_replaces_the_channels_and_retires_the_old_after_the_grace() -> None:
    clock = Clock()
    table, _ = _table(clock)
    table.offer(_route("v1", "a", "b"))
    assert table.offer(_route("v2", "a"))
    assert table.channels == ["v2/0", "v2/1"] and table.changes == 1
    assert table.route is not None and table.route.board_names == ["a"]
    clock.now += 29.9
    assert table.due() == []  # calls in flight on the old channels still finish
    clock.now += 0.2
    assert table.due() == ["v1/0", "v1/1"]
    assert table.due() == []  # handed back once


def test_a_failed_refresh_keeps_the_last_route() -> None:
    table, _ = _table(Clock())
    table.offer(_route("v1", "a"))
    table.keep_last(RouteError("scheduler away"))
    assert table.route is not None and table.route.version == "v1" and table.channels == ["v1/0", "v1/1"]


def test_a_fixed_table_never_follows() -> None:
    table, opened = _table(Clock(), follow=False)
    table.offer(_route("v1", "a", "b"))
    assert not table.offer(_route("v2", "a"))
    assert table.route is not None and table.route.version == "v1" and opened == ["v1/0", "v1/1"]


def test_drain_hands_back_current_and_retiring_channels() -> None:
    table, _ = _table(Clock())
    table.offer(_route("v1", "a"))
    table.offer(_route("v2", "b"))
    assert sorted(table.drain()) == ["v1/0", "v1/1", "v2/0", "v2/1"]
    assert table.channels == [] and table.drain() == []


def test_a_route_with_models_sends_each_to_its_boards_and_the_unnamed_to_the_default() -> None:
    route = RouteInfo.from_proto(
        pb.Route(
            target="ipv4:10.0.0.1:1,10.0.0.2:1,10.0.0.3:1",
            models=[
                pb.RouteModel(name="general", default=True, target="ipv4:10.0.0.1:1,10.0.0.2:1"),
                pb.RouteModel(name="plates", target="ipv4:10.0.0.1:1,10.0.0.3:1"),
                pb.RouteModel(name="faces", target=""),  # no holder in rotation: every board answers
            ],
        )
    )
    assert route.default_model == "general"
    assert route.targets == [route.target, "ipv4:10.0.0.1:1,10.0.0.2:1", "ipv4:10.0.0.1:1,10.0.0.3:1"]
    assert route.target_for("plates") == ("ipv4:10.0.0.1:1,10.0.0.3:1", "plates")
    assert route.target_for("") == ("ipv4:10.0.0.1:1,10.0.0.2:1", "general")  # named, for board3's sake
    assert route.target_for("faces") == (route.target, "faces")  # boards answer NOT_FOUND with the list


def test_a_route_without_models_sends_everything_everywhere() -> None:
    route = RouteInfo.from_proto(pb.Route(target="ipv4:10.0.0.1:1"))
    assert route.targets == [route.target] and route.target_for("") == (route.target, "")
    assert route.target_for("plates") == (route.target, "plates")
