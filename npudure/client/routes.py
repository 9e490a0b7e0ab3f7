"""The scheduler's route and the one state machine every proxyless client follows it with.

``Cluster.GetRoute`` returns a gRPC target naming every board in rotation and a service config
(weighted_round_robin fed by the boards' ORCA trailers, health checking, retries). This module holds
what a route is (``RouteInfo``), how to fetch it (blocking or asyncio: only the stub call differs), the
channel arguments a proxyless channel needs (``channel_options``) and ``RouteTable``: which route is
followed, its channels, and the replaced channels waiting out their grace before they are closed.

``RouteTable`` does no I/O and knows no clock of its own: the drivers in ``npudure.client.proxyless``
(a thread for the blocking client, a task for the asyncio one) fetch, offer the route and close what
it hands back. One decision table, two thin loops, so a fix to refresh or retire lands in both.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import grpc

from npudure.proto import contract
from npudure.proto import inference_pb2 as pb
from npudure.proto import inference_pb2_grpc as rpc
from npudure.security import access as security

log = logging.getLogger(__name__)

KEEPALIVE_MS = 1000
# The channel to the scheduler: back after its restart within 2 s (the default backs off for minutes).
CONTROL_OPTIONS = tuple(contract.reconnect_options())
# Grace before a replaced channel is closed: calls still in flight on it finish.
RETIRE_AFTER_S = 30.0
# A refresh's GetRoute deadline: short, so a scheduler away does not hold up the retiring of channels.
REFRESH_TIMEOUT_S = 2.0


class RouteError(Exception):
    """The scheduler gave no usable route; the message says why, in the user's terms."""


@dataclass(frozen=True)
class RouteInfo:
    target: str
    service_config_json: str
    boards: tuple[tuple[str, str], ...]  # (name, resolved IP:port)
    version: str
    tls: bool
    max_message_bytes: int
    refresh_interval_s: float
    # (model, a target naming only the boards that hold it), the cluster's default first; empty when
    # the boards report no models (older agents): then every board serves every request.
    models: tuple[tuple[str, str], ...] = ()
    default_model: str = ""

    @classmethod
    def from_proto(cls, route: pb.Route) -> RouteInfo:
        if not route.target:
            raise RouteError("the scheduler has no board in rotation (all drained or inactive)")
        return cls(
            route.target,
            route.service_config_json,
            tuple((b.name, b.resolved) for b in route.boards),
            route.version,
            route.tls,
            route.max_message_bytes or 4 << 20,
            route.refresh_interval_s or 1.0,
            tuple((m.name, m.target) for m in route.models if m.target),
            next((m.name for m in route.models if m.default), ""),
        )

    @property
    def board_names(self) -> list[str]:
        return [name for name, _ in self.boards]

    @property
    def targets(self) -> list[str]:
        """Every target a client opens a channel to: all the boards, then each model's own set."""
        return list(dict.fromkeys([self.target, *(target for _, target in self.models)]))

    def target_for(self, model: str) -> tuple[str, str]:
        """(where a request naming ``model`` goes, the model name to send it with). A placed model goes
        to its own boards; a request naming none goes to the default model's boards, naming it (a
        board whose own default is another model would answer with that one); a model the route does
        not place goes to every board, which answer NOT_FOUND with what they serve."""
        name = model or self.default_model
        for placed, target in self.models:
            if placed == name:
                return target, name
        return self.target, model


def channel_options(route: RouteInfo, extra: Sequence[tuple[str, object]] = ()) -> list[tuple[str, object]]:
    """Channel arguments for a proxyless channel (besides the target and credentials)."""
    return [
        ("grpc.service_config", route.service_config_json),
        ("grpc.enable_retries", 1),
        # perAttemptRecvTimeout in the retry policy is parsed only with this flag (C-core).
        ("grpc.experimental.enable_hedging", 1),
        # Retries replay the request from a buffer; the default 256 KiB cannot hold a 1.2 MB frame,
        # and a call whose request does not fit is never retried.
        ("grpc.per_rpc_retry_buffer_size", 2 * route.max_message_bytes),
        *contract.message_size_options(route.max_message_bytes),
        # A board whose link is cut or that froze answers nothing, but its TCP connection looks open:
        # pings find out within ~2 s, its in-flight calls fail over (UNAVAILABLE) and it leaves the
        # rotation. The agents accept pings this frequent (npudure.agent.server.KEEPALIVE).
        ("grpc.keepalive_time_ms", KEEPALIVE_MS),
        ("grpc.keepalive_timeout_ms", KEEPALIVE_MS),
        ("grpc.http2.ping_timeout_ms", KEEPALIVE_MS),  # what C-core 1.85 actually waits a ping for
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
        # Come back quickly after a board restarts (the default backs off up to two minutes).
        *contract.reconnect_options(),
        ("grpc.use_local_subchannel_pool", 1),
        # One channel, many boards: with TLS every board's certificate is checked against the fleet name
        # they all carry (security.AGENT_FLEET_NAME), not against one board's address.
        *([("grpc.ssl_target_name_override", security.AGENT_FLEET_NAME)] if route.tls else []),
        *extra,
    ]


def _wrap(error: grpc.RpcError, scheduler_target: str) -> RouteError:
    code = error.code()
    if code == grpc.StatusCode.UNIMPLEMENTED:
        return RouteError(f"{scheduler_target} has no GetRoute: is it an npudure scheduler of this version?")
    return RouteError(
        f"cannot get the route from the scheduler at {scheduler_target}: {code.name}: {error.details()}"
    )


def fetch_route_on(channel: grpc.Channel, scheduler_target: str, timeout_s: float = 5.0) -> RouteInfo:
    """The route, asked of the scheduler over an open (blocking) channel."""
    try:
        route = rpc.ClusterStub(channel).GetRoute(pb.RouteRequest(), timeout=timeout_s)
    except grpc.RpcError as exc:
        raise _wrap(exc, scheduler_target) from None
    return RouteInfo.from_proto(route)


def fetch_route(scheduler_target: str, timeout_s: float = 5.0) -> RouteInfo:
    """The route, asked once of the scheduler at ``scheduler_target`` (a channel of its own)."""
    with security.channel(scheduler_target) as channel:
        return fetch_route_on(channel, scheduler_target, timeout_s)


async def fetch_route_aio(
    channel: grpc.aio.Channel, scheduler_target: str, timeout_s: float = 5.0
) -> RouteInfo:
    try:
        route = await rpc.ClusterStub(channel).GetRoute(pb.RouteRequest(), timeout=timeout_s)
    except grpc.aio.AioRpcError as exc:
        raise _wrap(exc, scheduler_target) from None
    return RouteInfo.from_proto(route)


C = TypeVar("C")


class RouteTable(Generic[C]):
    """The route followed, the channels built for it, and the replaced channels in their grace period.

    ``open_channels`` builds the channels for a route (gRPC channels connect lazily: no I/O here).
    ``follow=False`` keeps the first route for good (a benchmark run whose route is part of its record).
    """

    def __init__(
        self,
        open_channels: Callable[[RouteInfo], list[C]],
        *,
        follow: bool = True,
        retire_after_s: float = RETIRE_AFTER_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._open = open_channels
        self.follow = follow
        self._retire_after_s = retire_after_s
        self._clock = clock
        self.route: RouteInfo | None = None
        self.channels: list[C] = []
        self.changes = 0  # route changes after the first route
        self._retiring: list[tuple[float, list[C]]] = []  # (close at, channels)

    @property
    def refresh_interval_s(self) -> float:
        return self.route.refresh_interval_s if self.route else 1.0

    def offer(self, route: RouteInfo) -> bool:
        """Take a freshly fetched route; True when it was installed (the first, or a new version)."""
        if self.route is not None and (not self.follow or route.version == self.route.version):
            return False
        old, self.channels = self.channels, self._open(route)
        if self.route is not None:
            self.changes += 1
            log.info("route changed: %s", ", ".join(route.board_names))
        self.route = route
        if old:
            self._retiring.append((self._clock() + self._retire_after_s, old))
        return True

    def keep_last(self, error: RouteError) -> None:
        """A refresh failed: the scheduler is away (restart) or has nothing in rotation. The last route
        stays in use, so a scheduler restart costs proxyless clients nothing."""
        log.debug("keeping the last route: %s", error)

    def due(self) -> list[C]:
        """Replaced channels whose grace is over: the caller closes them."""
        now = self._clock()
        ready = [c for at, channels in self._retiring if at <= now for c in channels]
        self._retiring = [(at, channels) for at, channels in self._retiring if at > now]
        return ready

    def drain(self) -> list[C]:
        """Every channel held, current and retiring, for the caller to close; the table is empty after."""
        held = [*self.channels, *(c for _, channels in self._retiring for c in channels)]
        self.channels, self._retiring = [], []
        return held
