"""Proxyless clients: frames go straight to the boards; the scheduler only says where they are.

A channel built from the scheduler's route (``npudure.client.routes``) balances over the boards by
itself; these clients build it and rebuild it when the route's ``version`` changes (polled every
``refresh_interval_s``). When the scheduler is unreachable the last route stays in use: a scheduler
restart costs proxyless clients nothing.

    import npudure
    with npudure.connect("10.0.0.10:50050") as cluster:
        reply = cluster.infer(request)          # an npudure.v1.InferRequest

    channel, route = await open_aio_channel("10.0.0.10:50050")   # asyncio, a fixed route

Both long-lived clients drive one ``RouteTable`` (the decisions: install, keep the last route, retire
after a grace). The blocking one runs it on a thread with blocking channels, the asyncio one on a task
with aio channels. A single asyncio core behind a blocking facade would have sent every blocking
call through another thread's event loop; this way each call stays on the caller's own stack and
only the refresh loop differs. Constructors do no I/O: ``start()`` / ``open()`` (or ``with``) fetch
the first route and start the refresh loop.

TLS identity and admin token come from the environment, as for every npudure client
(``npudure.security.access``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from collections.abc import Sequence
from dataclasses import replace

import grpc
from google.protobuf.message import DecodeError

from npudure.client.central import Central
from npudure.client.opening import ClosedOnFailure, Unreachable
from npudure.client.routes import (
    CONTROL_OPTIONS,
    REFRESH_TIMEOUT_S,
    RouteError,
    RouteInfo,
    RouteTable,
    channel_options,
    fetch_route_aio,
    fetch_route_on,
)
from npudure.config import TlsConfig
from npudure.proto import contract, wire
from npudure.proto import inference_pb2 as pb
from npudure.proto import inference_pb2_grpc as rpc
from npudure.security import access as security


def aio_board_channel(
    route: RouteInfo,
    tls: TlsConfig | None = None,
    options: Sequence[tuple[str, object]] = (),
    from_env: bool = True,
) -> grpc.aio.Channel:
    return security.aio_channel(route.target, channel_options(route, options), tls=tls, from_env=from_env)


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


class ProxylessTarget(ClosedOnFailure):
    """Raw-bytes Infer calls spread over the boards by gRPC, following the scheduler's route.

    Same shape as the harness's ``Target`` (open / infer / close), so a load generator can take
    either. ``connections`` channels, each balancing over every board by itself. Given ``fixed_route``
    it neither asks the scheduler nor follows changes (a benchmark run records the route it ran on).
    ``from_env=False``: no TLS identity or admin token from the environment (a benchmark measuring
    the bare frame path; frames need no token).
    """

    def __init__(
        self,
        scheduler_target: str,
        connections: int = 1,
        *,
        tls: TlsConfig | None = None,
        options: Sequence[tuple[str, object]] = (),
        fixed_route: RouteInfo | None = None,
        from_env: bool = True,
    ) -> None:
        self.address = scheduler_target
        self.from_env = from_env
        self.connections = max(1, connections)
        self.tls = tls
        self.options = list(options)
        self._fixed_route = fixed_route
        self._table: RouteTable[grpc.aio.Channel] = RouteTable(
            self._open_channels, follow=fixed_route is None
        )
        # Per target of the route (all boards, then each model's boards): its calls.
        self._calls: dict[str, list[grpc.aio.UnaryUnaryMultiCallable]] = {}
        # A payload's target and the bytes to send (its model named when it named none), per payload.
        self._routed: dict[bytes, tuple[str, bytes]] = {}
        self._rr = itertools.count()
        self._control: grpc.aio.Channel | None = None
        self._refresher: asyncio.Task[None] | None = None

    @property
    def route(self) -> RouteInfo | None:
        return self._table.route

    @property
    def route_changes(self) -> int:
        return self._table.changes

    def _open_channels(self, route: RouteInfo) -> list[grpc.aio.Channel]:
        """``connections`` channels to each of the route's targets, target by target."""
        return [
            aio_board_channel(replace(route, target=target), self.tls, self.options, self.from_env)
            for target in route.targets
            for _ in range(self.connections)
        ]

    def _install(self, route: RouteInfo) -> None:
        if self._table.offer(route):
            channels = iter(self._table.channels)
            self._calls = {
                target: [next(channels).unary_unary(contract.INFER_METHOD) for _ in range(self.connections)]
                for target in route.targets
            }
            self._routed = {}

    async def _connect(self, ready_timeout_s: float) -> None:
        try:
            route = self._fixed_route
            if route is None:
                self._control = security.aio_channel(self.address, CONTROL_OPTIONS, tls=self.tls)
                route = await fetch_route_aio(self._control, self.address, ready_timeout_s)
            self._install(route)
            await asyncio.wait_for(
                asyncio.gather(*(c.channel_ready() for c in self._table.channels)), ready_timeout_s
            )
        except RouteError as exc:
            raise Unreachable(str(exc)) from None
        except TimeoutError:
            raise Unreachable(
                f"no board in the route accepted a connection within {ready_timeout_s:.0f}s"
            ) from None
        if self._control is not None:
            self._refresher = asyncio.create_task(self._refresh_loop(self._control))

    async def _refresh_loop(self, control: grpc.aio.Channel) -> None:
        while True:
            await asyncio.sleep(self._table.refresh_interval_s)
            try:
                self._install(await fetch_route_aio(control, self.address, REFRESH_TIMEOUT_S))
            except RouteError as exc:
                self._table.keep_last(exc)
            for channel in self._table.due():
                await channel.close()

    def infer(self, payload: bytes, timeout_s: float) -> grpc.aio.UnaryUnaryCall:
        routed = self._routed.get(payload)
        if routed is None:
            routed = self._routed[payload] = self._route_payload(payload)
        target, data = routed
        calls = self._calls[target]
        return calls[next(self._rr) % len(calls)](data, timeout=timeout_s)

    def _route_payload(self, payload: bytes) -> tuple[str, bytes]:
        route = self._table.route
        assert route is not None, "ProxylessTarget not open"
        if not route.models:
            return route.target, payload
        try:
            model = wire.parse(payload).model
        except DecodeError:  # not a request: every board, which answer INVALID_ARGUMENT
            return route.target, payload
        target, name = route.target_for(model)
        return target, payload if name == model else payload + wire.model_field(name)

    async def close(self) -> None:
        refresher, self._refresher = self._refresher, None
        if refresher is not None:
            refresher.cancel()
            await asyncio.gather(refresher, return_exceptions=True)
        self._calls, self._routed = {}, {}
        for channel in self._table.drain():
            await channel.close()
        control, self._control = self._control, None
        if control is not None:
            await control.close()


class Proxyless:
    """Blocking client: ``infer(request)`` straight to the boards, the route refreshed on a thread.

    Nothing happens until ``start()`` (or ``with``): it fetches the route (RouteError when there is
    none within ``route_timeout_s``) and starts the refresh thread.
    """

    def __init__(
        self,
        scheduler_target: str,
        *,
        options: Sequence[tuple[str, object]] = (),
        route_timeout_s: float = 5.0,
    ) -> None:
        self.scheduler_target = scheduler_target
        self.options = list(options)
        self.route_timeout_s = route_timeout_s
        self._lock = threading.Lock()
        self._table: RouteTable[grpc.Channel] = RouteTable(self._open_channels)
        self._stub: rpc.InferenceStub | None = None
        self._stubs: dict[str, rpc.InferenceStub] = {}  # per target of the route
        self._control: grpc.Channel | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Proxyless:
        """Fetch the route and start following it; a no-op when already started."""
        if self._thread is not None:
            return self
        control = security.channel(self.scheduler_target, CONTROL_OPTIONS)
        try:
            self._install(fetch_route_on(control, self.scheduler_target, self.route_timeout_s))
        except BaseException:
            control.close()
            raise
        self._control = control
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._refresh_loop, args=(control,), name="npudure-route", daemon=True
        )
        self._thread.start()
        return self

    @property
    def route(self) -> RouteInfo:
        route = self._table.route
        if route is None:
            raise RuntimeError("the proxyless client is not started: call start() or use it in a with block")
        return route

    def _open_channels(self, route: RouteInfo) -> list[grpc.Channel]:
        """One channel to each of the route's targets: all the boards, then each model's own."""
        return [security.channel(target, channel_options(route, self.options)) for target in route.targets]

    def _install(self, route: RouteInfo) -> None:
        with self._lock:
            if self._table.offer(route):
                self._stubs = {
                    target: rpc.InferenceStub(channel)
                    for target, channel in zip(route.targets, self._table.channels, strict=True)
                }
                self._stub = self._stubs[route.target]

    @property
    def stub(self) -> rpc.InferenceStub:
        """The current route's stub (replaced when the route changes: fetch it per call)."""
        with self._lock:
            if self._stub is None:
                raise RuntimeError(
                    "the proxyless client is not started: call start() or use it in a with block"
                )
            return self._stub

    def infer(self, request: pb.InferRequest, timeout: float | None = None) -> pb.InferResponse:
        """Straight to a board that holds the request's model (the route's default when it names none)."""
        with self._lock:
            route, stubs = self._table.route, self._stubs
        if route is None or not route.models:
            reply: pb.InferResponse = self.stub.Infer(request, timeout=timeout)
            return reply
        target, name = route.target_for(request.model)
        if name != request.model:
            named = pb.InferRequest()
            named.CopyFrom(request)
            named.model = name
            request = named
        routed: pb.InferResponse = stubs[target].Infer(request, timeout=timeout)
        return routed

    def _refresh_loop(self, control: grpc.Channel) -> None:
        while not self._stop.wait(self._table.refresh_interval_s):
            try:
                self._install(fetch_route_on(control, self.scheduler_target, REFRESH_TIMEOUT_S))
            except RouteError as exc:
                self._table.keep_last(exc)
            with self._lock:
                due = self._table.due()
            for channel in due:  # closed off the lock: calls on them may still be in flight
                channel.close()

    def close(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(5)
        with self._lock:
            held, self._stub, self._stubs = self._table.drain(), None, {}
        for channel in held:
            with contextlib.suppress(Exception):
                channel.close()
        control, self._control = self._control, None
        if control is not None:
            control.close()

    def __enter__(self) -> Proxyless:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(scheduler_target: str, mode: str = "proxyless", **kwargs: object) -> Proxyless | Central:
    """A client for the cluster whose scheduler listens at ``scheduler_target``, ready to use:
    proxyless (straight to the boards; the route fetched here) or ``mode="central"`` (through the
    scheduler, riding out its restarts)."""
    if mode == "central":
        return Central(scheduler_target, **kwargs)  # type: ignore[arg-type]
    if mode != "proxyless":
        raise ValueError(f"mode {mode!r} is not known; use proxyless or central")
    return Proxyless(scheduler_target, **kwargs).start()  # type: ignore[arg-type]
