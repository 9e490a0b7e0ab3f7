"""Proxyless clients: frames go straight to the boards; the scheduler only says where they are.

The scheduler's ``Cluster.GetRoute`` returns a gRPC target naming every board in rotation and a
service config (weighted_round_robin fed by the boards' ORCA trailers, health checking, retries). A
channel built from them balances by itself; these helpers build it and rebuild it when the route's
``version`` changes (polled every ``refresh_interval_s``). When the scheduler is unreachable the last
route stays in use: a scheduler restart costs proxyless clients nothing.

    import npudure
    with npudure.connect("10.0.0.10:50050") as cluster:
        reply = cluster.infer(request)          # an npudure.v1.InferRequest

    channel, route = await open_aio_channel("10.0.0.10:50050")   # asyncio, a fixed route

TLS identity and admin token come from the environment, as for every npudure client
(``npudure.security.access``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import grpc

from npudure.client.central import Central
from npudure.config import TlsConfig
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
        )


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


def fetch_route(scheduler_target: str, timeout_s: float = 5.0) -> RouteInfo:
    with security.channel(scheduler_target) as channel:
        try:
            route = rpc.ClusterStub(channel).GetRoute(pb.RouteRequest(), timeout=timeout_s)
        except grpc.RpcError as exc:
            raise _wrap(exc, scheduler_target) from None
    return RouteInfo.from_proto(route)


async def fetch_route_aio(
    channel: grpc.aio.Channel, scheduler_target: str, timeout_s: float = 5.0
) -> RouteInfo:
    try:
        route = await rpc.ClusterStub(channel).GetRoute(pb.RouteRequest(), timeout=timeout_s)
    except grpc.aio.AioRpcError as exc:
        raise _wrap(exc, scheduler_target) from None
    return RouteInfo.from_proto(route)


def aio_board_channel(
    route: RouteInfo, tls: TlsConfig | None = None, options: Sequence[tuple[str, object]] = ()
) -> grpc.aio.Channel:
    return security.aio_channel(route.target, channel_options(route, options), tls=tls)


async def open_aio_channel(
    scheduler_target: str,
    *,
    tls: TlsConfig | None = None,
    options: Sequence[tuple[str, object]] = (),
    timeout_s: float = 10.0,
) -> tuple[grpc.aio.Channel, RouteInfo]:
    """One asyncio channel to every board in the current route, connected to at least one of them.

    The route is fixed for this channel: for a long-lived client use ``ProxylessTarget``, which
    follows route changes. ``tls`` defaults to the environment's (NPUDURE_TLS_*).
    """
    async with security.aio_channel(scheduler_target, CONTROL_OPTIONS, tls=tls) as control:
        route = await fetch_route_aio(control, scheduler_target, timeout_s)
    channel = aio_board_channel(route, tls, options)
    try:
        await asyncio.wait_for(channel.channel_ready(), timeout_s)
    except TimeoutError:
        await channel.close()
        raise RouteError(
            f"none of the boards in the route ({', '.join(n + '=' + a for n, a in route.boards)}) "
            f"accepted a connection within {timeout_s:.0f}s"
        ) from None
    return channel, route


class ProxylessTarget:
    """Raw-bytes Infer calls spread over the boards by gRPC, following the scheduler's route.

    Same shape as the harness's ``Target`` (open / infer / close), so a load generator can take
    either. ``connections`` channels, each balancing over every board by itself.
    """

    def __init__(
        self,
        scheduler_target: str,
        connections: int = 1,
        *,
        tls: TlsConfig | None = None,
        options: Sequence[tuple[str, object]] = (),
    ) -> None:
        self.address = scheduler_target
        self.connections = max(1, connections)
        self.tls = tls
        self.options = list(options)
        self.route: RouteInfo | None = None
        self.route_changes = 0
        self._control: grpc.aio.Channel | None = None
        self._channels: list[grpc.aio.Channel] = []
        self._calls: list[grpc.aio.UnaryUnaryMultiCallable] = []
        self._rr = itertools.count()
        self._refresher: asyncio.Task[None] | None = None
        self._retiring: set[asyncio.Task[None]] = set()

    async def open(self, ready_timeout_s: float = 10.0) -> None:
        self._control = security.aio_channel(self.address, CONTROL_OPTIONS, tls=self.tls)
        try:
            route = await fetch_route_aio(self._control, self.address, ready_timeout_s)
            self._install(route)
            await asyncio.wait_for(
                asyncio.gather(*(c.channel_ready() for c in self._channels)), ready_timeout_s
            )
        except (RouteError, TimeoutError) as exc:
            await self.close()
            raise ConnectionError(
                str(exc)
                if isinstance(exc, RouteError)
                else f"no board in the route accepted a connection within {ready_timeout_s:.0f}s"
            ) from None
        self._refresher = asyncio.create_task(self._refresh_loop())

    def _install(self, route: RouteInfo) -> None:
        old = self._channels
        self._channels = [aio_board_channel(route, self.tls, self.options) for _ in range(self.connections)]
        self._calls = [c.unary_unary(contract.INFER_METHOD) for c in self._channels]
        if self.route is not None:
            self.route_changes += 1
            log.info("route changed: %s", ", ".join(n for n, _ in route.boards))
        self.route = route
        if old:
            task = asyncio.create_task(self._retire(old))
            self._retiring.add(task)
            task.add_done_callback(self._retiring.discard)

    async def _retire(self, channels: list[grpc.aio.Channel]) -> None:
        await asyncio.sleep(RETIRE_AFTER_S)
        for channel in channels:
            await channel.close()

    async def _refresh_loop(self) -> None:
        assert self._control is not None
        while True:
            await asyncio.sleep(self.route.refresh_interval_s if self.route else 1.0)
            try:
                route = await fetch_route_aio(self._control, self.address, timeout_s=2.0)
            except RouteError as exc:
                # Scheduler away (restart) or nothing in rotation: keep sending on the last route.
                log.debug("keeping the last route: %s", exc)
                continue
            if self.route is None or route.version != self.route.version:
                self._install(route)

    def infer(self, payload: bytes, timeout_s: float) -> grpc.aio.UnaryUnaryCall:
        call = self._calls[next(self._rr) % len(self._calls)]
        return call(payload, timeout=timeout_s)

    async def close(self) -> None:
        tasks = [t for t in (self._refresher, *self._retiring) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        channels, self._channels, self._calls = self._channels, [], []
        for channel in channels:
            await channel.close()
        if self._control is not None:
            await self._control.close()
            self._control = None


class Proxyless:
    """Blocking client: ``infer(request)`` straight to the boards, the route refreshed on a thread."""

    def __init__(self, scheduler_target: str, *, options: Sequence[tuple[str, object]] = ()) -> None:
        self.scheduler_target = scheduler_target
        self.options = list(options)
        self.route = fetch_route(scheduler_target)
        self._lock = threading.Lock()
        self._channel = self._open(self.route)
        self._stub = rpc.InferenceStub(self._channel)
        self._retired: list[grpc.Channel] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._refresh_loop, name="npudure-route", daemon=True)
        self._thread.start()

    def _open(self, route: RouteInfo) -> grpc.Channel:
        return security.channel(route.target, channel_options(route, self.options))

    @property
    def stub(self) -> rpc.InferenceStub:
        """The current route's stub (replaced when the route changes: fetch it per call)."""
        with self._lock:
            return self._stub

    def infer(self, request: pb.InferRequest, timeout: float | None = None) -> pb.InferResponse:
        return self.stub.Infer(request, timeout=timeout)

    def _refresh_loop(self) -> None:
        while not self._stop.wait(self.route.refresh_interval_s):
            try:
                route = fetch_route(self.scheduler_target, timeout_s=2.0)
            except RouteError as exc:
                log.debug("keeping the last route: %s", exc)
                continue
            if route.version == self.route.version:
                continue
            channel = self._open(route)
            with self._lock:
                old, self._channel, self._stub, self.route = (
                    self._channel,
                    channel,
                    rpc.InferenceStub(channel),
                    route,
                )
            log.info("route changed: %s", ", ".join(n for n, _ in route.boards))
            # Close the old channel later, off this loop: calls on it may still be in flight.
            timer = threading.Timer(RETIRE_AFTER_S, old.close)
            timer.daemon = True
            timer.start()
            self._retired.append(old)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        with self._lock:
            self._channel.close()
        for old in self._retired:
            with contextlib.suppress(Exception):
                old.close()

    def __enter__(self) -> Proxyless:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(scheduler_target: str, mode: str = "proxyless", **kwargs: object) -> Proxyless | Central:
    """A client for the cluster whose scheduler listens at ``scheduler_target``: proxyless (straight
    to the boards) or ``mode="central"`` (through the scheduler, riding out its restarts)."""
    if mode == "central":
        return Central(scheduler_target, **kwargs)  # type: ignore[arg-type]
    if mode != "proxyless":
        raise ValueError(f"mode {mode!r} is not known; use proxyless or central")
    return Proxyless(scheduler_target, **kwargs)  # type: ignore[arg-type]
