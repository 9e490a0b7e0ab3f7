"""Where a run's requests go: the scheduler (one target kept open for the whole session), one agent,
or the boards themselves, balanced by gRPC over the scheduler's route (proxyless). The agent and
proxyless targets are opened per run: the route follows the active set, which the run just chose."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from npudure.client.proxyless import ProxylessTarget
from npudure.client.routes import RouteError, RouteInfo, fetch_route
from npudure_workshop.bench.cluster import BenchError, ClusterAdmin
from npudure_workshop.bench.load import LoadTarget, Target
from npudure_workshop.bench.progress import Progress
from npudure_workshop.bench.settings import BenchSettings
from npudure_workshop.bench.spec import VIAS, RunSpec


@dataclass
class ChosenTarget:
    target: LoadTarget
    info: dict[str, Any]  # recorded in run.json as load_target
    per_run: bool = field(default=True)  # closed after the run (the scheduler's target is kept)


def _scheduler_target(address: str, settings: BenchSettings) -> LoadTarget:
    if settings.api == "zmq":
        if not settings.zmq_endpoint:
            raise ValueError("api zmq needs zmq_endpoint")
        from npudure_workshop.bench.zmq_load import ZmqTarget

        return ZmqTarget(settings.zmq_endpoint)
    if settings.api != "http":
        return Target(address, settings.harness_connections)
    if not settings.http_url:
        raise ValueError("api http needs http_url")
    from npudure_workshop.bench.http_load import HttpTarget

    return HttpTarget(settings.http_url, settings.harness_connections)


class TargetChoice:
    """Built closed; ``open()`` connects the scheduler's target."""

    def __init__(
        self, scheduler: str, admin: ClusterAdmin, settings: BenchSettings, progress: Progress
    ) -> None:
        self.scheduler = scheduler
        self._admin = admin
        self._settings = settings
        self._progress = progress
        self._kept = ChosenTarget(
            _scheduler_target(scheduler, settings),
            {"via": "scheduler", "target": scheduler, "api": settings.api},
            per_run=False,
        )

    async def open(self) -> None:
        await self._kept.target.open()

    async def close(self) -> None:
        await self._kept.target.close()

    async def for_run(self, spec: RunSpec) -> ChosenTarget:
        """The run's target, open."""
        if spec.via == "scheduler":
            return self._kept
        addresses = {b.name: b.address for b in self._admin.status().boards}
        missing = [b for b in spec.boards if b not in addresses]
        if missing:
            raise BenchError(f"the scheduler does not know board(s) {', '.join(missing)}")
        connections = self._settings.harness_connections
        target: LoadTarget
        info: dict[str, Any]
        if spec.via == "agent":
            if len(spec.boards) != 1:
                raise ValueError("a run straight at an agent loads exactly one board")
            address = addresses[spec.boards[0]]
            target, info = Target(address, connections), {"via": "agent", "target": address}
        elif spec.via == "proxyless":
            route = self._route(spec.boards)
            # The run's route is part of its record: the target keeps it and does not follow changes.
            target = ProxylessTarget(self.scheduler, connections, fixed_route=route)
            info = {
                "via": "proxyless",
                "target": route.target,
                "route_version": route.version,
                "route_boards": [list(b) for b in route.boards],
                "service_config": route.service_config_json,
            }
        else:
            raise ValueError(f"unknown load path {spec.via!r}; use one of: {', '.join(VIAS)}")
        await target.open()
        return ChosenTarget(target, info)

    async def done(self, chosen: ChosenTarget) -> None:
        if chosen.per_run:
            await chosen.target.close()

    def _route(self, boards: tuple[str, ...]) -> RouteInfo:
        """The scheduler's route (GetRoute), once it lists exactly the boards this run asks for: the
        active set just changed, and a board enters the rotation when its agent reports SERVING."""
        deadline = time.monotonic() + self._settings.board_up_wait_s
        while True:
            try:
                route = fetch_route(self.scheduler)
            except RouteError as exc:
                raise BenchError(str(exc)) from None
            listed = sorted(route.board_names)
            if listed == sorted(boards) or time.monotonic() >= deadline:
                if listed != sorted(boards):
                    self._progress.note(
                        f"warning: the scheduler's route lists {', '.join(listed) or 'no board'}, not "
                        f"{', '.join(boards)}; running anyway (the run will be marked invalid)"
                    )
                return route
            time.sleep(0.2)
