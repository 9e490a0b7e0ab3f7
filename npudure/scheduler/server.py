"""The scheduler's gRPC front: Inference (raw-bytes forwarding), Cluster admin, health, reflection."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from npudure import __version__
from npudure.config import SchedulerConfig
from npudure.proto import contract
from npudure.proto import inference_pb2 as pb
from npudure.proto import inference_pb2_grpc as rpc
from npudure.scheduler.boards import Board, BoardMonitor, open_board
from npudure.scheduler.dispatch import Dispatcher, DispatchError
from npudure.scheduler.membership import Membership, ReloadError, ReloadInterrupted
from npudure.scheduler.metrics import SchedulerMetrics
from npudure.scheduler.policies import POLICIES, make_policy
from npudure.scheduler.route import ServingPusher, build_route, resolve
from npudure.scheduler.state import state_path
from npudure.security import access as security
from npudure.security import admin_inputs
from npudure.security.revocation import RevocationCheck, Revocations
from npudure.service import grpc_limits, handover, metrics_http
from npudure.service.lifecycle import HandoverSettings, Lifecycle
from npudure.service.runtime import SERVER_OPTIONS

if TYPE_CHECKING:  # imported at run time only when configured (see _start_http_api)
    from npudure.scheduler import http_api, zmq_api

log = logging.getLogger(__name__)

SERVICE_NAMES = (contract.INFERENCE, contract.CLUSTER, health.SERVICE_NAME, reflection.SERVICE_NAME)


class StartupError(Exception):
    pass


class Lease:
    """One benchmark at a time: two harnesses on one cluster measure each other, not the cluster."""

    def __init__(self) -> None:
        self.holder = ""
        self.expires = 0.0

    def current(self) -> str:
        return self.holder if self.holder and time.monotonic() < self.expires else ""

    def acquire(self, holder: str, ttl_s: float) -> pb.Lease:
        current = self.current()
        if current and current != holder:
            raise DispatchError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"the cluster is leased to {current!r} for another {self.expires - time.monotonic():.0f}s: "
                "another benchmark is running; wait for it or stop it",
            )
        self.holder, self.expires = holder, time.monotonic() + ttl_s
        return pb.Lease(holder=holder, expires_in_s=ttl_s)

    def release(self, holder: str) -> pb.Lease:
        if self.current() == holder:
            self.holder = ""
        return pb.Lease(holder=self.current())


class Scheduler(rpc.ClusterServicer):
    def __init__(self, config: SchedulerConfig, config_path: str | None = None) -> None:
        self.config = config
        self.config_path = config_path  # what ReloadBoards re-reads
        # The fleet's CRL, re-read by ReloadBoards too (a revoked client is refused without a restart).
        self.revocations = Revocations(config.tls) if config.tls else None
        self.metrics = SchedulerMetrics()
        # One set of admin tokens: what admin callers must send and what the boards get; re-read in
        # place by ReloadBoards (a rotation needs no restart).
        tokens = security.AdminTokens(config.admin.token_file)
        self.boards: list[Board] = [open_board(i, b, config, tokens) for i, b in enumerate(config.boards)]
        self.by_name = {b.name: b for b in self.boards}
        self.dispatch = Dispatcher(self.boards, config, self.metrics)
        self.serving = ServingPusher(self.boards)
        self.monitors = [BoardMonitor(b, config, self._state_changed, self.serving.sync) for b in self.boards]
        self._resolved: dict[str, str] = {}
        self.lease = Lease()
        self.health = health.aio.HealthServicer()
        self.admin = security.AdminGuard(config.admin, config.tls, tokens)
        self.metrics.watch_admin(self.admin)
        self._tasks: list[asyncio.Task[None]] = []
        self.membership = Membership(self)
        self.membership.restore()
        # True while a handover's successor takes the saved state over (serve() wires the lifecycle).
        self.handing_over: Callable[[], bool] = lambda: False

    async def _may_change(self, context: grpc.aio.ServicerContext, rpc_name: str) -> None:
        """An admin call that changes the state: credentials first, then refused (UNAVAILABLE, the
        client retries and reaches the successor) while this process hands its state over."""
        await self.admin.check(context, rpc_name)
        if self.handing_over():
            log.warning("refused %s from %s: handing over to a new scheduler", rpc_name, context.peer())
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"{rpc_name}: {contract.HANDING_OVER}")

    def _rotation_changed(self) -> pb.ClusterStatus:
        """After an admin RPC changed which boards take work: metrics and health follow, the change is
        kept for the next start, and the caller gets the cluster as it now is."""
        self._state_changed()
        self.membership.save()
        return self.cluster_status()

    def _state_changed(self) -> None:
        for board in self.boards:
            for state in pb.BoardState.keys()[1:]:
                self.metrics.board_up.labels(board.name, state[12:]).set(
                    int(board.state == pb.BoardState.Value(state))
                )
            self.metrics.board_drained.labels(board.name).set(int(board.draining or not board.active))
        self.dispatch.capacity_changed()
        self.serving.sync_all()

    # ------------------------------------------------------------------ data path (raw bytes)
    async def infer(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        remaining = context.time_remaining()
        timeout = self.config.request_timeout_s if remaining is None else min(remaining, 3600.0)
        try:
            reply = await self.dispatch.forward(request, time.monotonic() + timeout)
        except DispatchError as exc:
            self.metrics.requests.labels(exc.code.name).inc()
            await context.abort(exc.code, str(exc))
        except grpc.aio.AioRpcError as exc:
            self.metrics.requests.labels(exc.code().name).inc()
            await context.abort(exc.code(), exc.details() or exc.code().name)
        self.metrics.requests.labels("OK").inc()
        return reply

    def inference_handler(self) -> grpc.GenericRpcHandler:
        # No deserializer: the 1.2 MB frame is forwarded as received, never parsed here.
        return grpc.method_handlers_generic_handler(
            contract.INFERENCE, {"Infer": grpc.unary_unary_rpc_method_handler(self.infer)}
        )

    # ------------------------------------------------------------------ admin
    def cluster_status(self) -> pb.ClusterStatus:
        return pb.ClusterStatus(
            policy=self.dispatch.policy.name,
            boards=[b.to_proto() for b in self.boards],
            queue_depth=self.dispatch.queue_depth,
            queue_limit=self.config.queue_limit,
            connections_per_board=self.config.connections_per_board,
            lease_holder=self.lease.current(),
            scheduler_version=__version__,
            served_total=self.dispatch.served,
            retries_total=self.dispatch.retries,
        )

    async def GetClusterStatus(
        self, request: pb.ClusterStatusRequest, context: grpc.aio.ServicerContext
    ) -> pb.ClusterStatus:
        return self.cluster_status()

    async def SetActiveNodes(
        self, request: pb.SetActiveNodesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ClusterStatus:
        await self._may_change(context, "SetActiveNodes")
        names = await admin_inputs.require(context, admin_inputs.node_names, list(request.nodes))
        unknown = [n for n in names if n not in self.by_name]
        if not names or unknown:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                (
                    f"unknown board(s) {', '.join(unknown)}; "
                    if unknown
                    else "the active set cannot be empty; "
                )
                + f"boards are: {', '.join(self.by_name)}",
            )
        for board in self.boards:
            board.active = board.name in names
        log.info("active boards: %s", ", ".join(names))
        return self._rotation_changed()

    async def SetPolicy(
        self, request: pb.SetPolicyRequest, context: grpc.aio.ServicerContext
    ) -> pb.ClusterStatus:
        await self._may_change(context, "SetPolicy")
        await admin_inputs.require(context, admin_inputs.policy_name, request.policy)
        if request.policy not in POLICIES:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"unknown policy {request.policy!r}; use one of: {', '.join(POLICIES)}",
            )
        self.dispatch.policy = make_policy(request.policy)
        log.info("policy: %s", request.policy)
        self.membership.save()
        return self.cluster_status()

    async def DrainNode(
        self, request: pb.DrainNodeRequest, context: grpc.aio.ServicerContext
    ) -> pb.ClusterStatus:
        await self._may_change(context, "DrainNode")
        board = await self._board(request.node, context)
        if board.name in self.membership.leaving:
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"board {board.name} is leaving (removed from the config)",
            )
        board.draining = request.drain
        log.info("board %s %s", board.name, "draining" if request.drain else "back in rotation")
        return self._rotation_changed()

    async def SetNodeCpuCap(
        self, request: pb.SetNodeCpuCapRequest, context: grpc.aio.ServicerContext
    ) -> pb.NodeStatus:
        await self.admin.check(context, "SetNodeCpuCap")
        await admin_inputs.require(context, admin_inputs.cpu_cap, request.mhz)
        board = await self._board(request.node, context)
        try:
            status: pb.NodeStatus = await rpc.NodeStub(board.channels[0]).SetCpuCap(
                pb.SetCpuCapRequest(mhz=request.mhz), timeout=5
            )
            return status
        except grpc.aio.AioRpcError as exc:
            await context.abort(exc.code(), f"board {board.name}: {exc.details()}")

    async def AcquireLease(self, request: pb.LeaseRequest, context: grpc.aio.ServicerContext) -> pb.Lease:
        await self._may_change(context, "AcquireLease")
        ttl_s = await admin_inputs.require(context, admin_inputs.lease, request.holder, request.ttl_s)
        try:
            lease = self.lease.acquire(request.holder, ttl_s)
        except DispatchError as exc:
            await context.abort(exc.code, str(exc))
        self.membership.save()
        return lease

    async def ReleaseLease(self, request: pb.LeaseRequest, context: grpc.aio.ServicerContext) -> pb.Lease:
        await self._may_change(context, "ReleaseLease")
        lease = self.lease.release(request.holder)
        self.membership.save()
        return lease

    async def GetRoute(self, request: pb.RouteRequest, context: grpc.aio.ServicerContext) -> pb.Route:
        for board in self.boards:
            if board.name not in self._resolved:
                try:
                    self._resolved[board.name] = await asyncio.to_thread(resolve, board.address)
                except (OSError, ValueError) as exc:
                    await context.abort(
                        grpc.StatusCode.UNAVAILABLE,
                        f"cannot resolve board {board.name} at {board.address}: {exc}",
                    )
        return build_route(self.boards, self.config, self._resolved)

    async def ReloadBoards(
        self, request: pb.ReloadBoardsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ReloadBoardsReply:
        await self._may_change(context, "ReloadBoards")
        try:
            reply = await self.membership.reload()
        except ReloadInterrupted:
            log.warning("reload from %s interrupted by a handover: not applied here", context.peer())
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"ReloadBoards: {contract.HANDING_OVER}")
        except ReloadError as exc:
            log.error("reload refused, still serving %s: %s", ", ".join(self.by_name), exc)
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        reply.status.CopyFrom(self.cluster_status())
        return reply

    async def _board(self, name: str, context: grpc.aio.ServicerContext) -> Board:
        board = self.by_name.get(await admin_inputs.require(context, admin_inputs.node_name, name))
        if board is None:
            await context.abort(
                grpc.StatusCode.NOT_FOUND, f"no board named {name!r}; boards are: {', '.join(self.by_name)}"
            )
            raise AssertionError("context.abort returns only by raising")  # for the type checker
        return board

    # ------------------------------------------------------------------ lifecycle
    async def wait_for_boards(self) -> None:
        """Check every board once at start-up; name the unreachable ones and how to fix them."""
        deadline = time.monotonic() + self.config.startup_wait_s
        pending = list(self.monitors)
        while pending:
            results = await asyncio.gather(*(m.check_once() for m in pending))
            pending = [m for m, r in zip(pending, results, strict=True) if r != "serving"]
            if not pending or time.monotonic() >= deadline:
                break
            await asyncio.sleep(0.5)
        for monitor in pending:
            board = monitor.board
            board.down = True
            log.error(
                "board %s at %s is unreachable or not serving: check that npudure-agent runs on it "
                "(systemctl status npudure-agent) and that its address in the scheduler config is right; "
                "it stays out of rotation until its health checks pass",
                board.name,
                board.address,
            )
        if len(pending) == len(self.boards):
            raise StartupError(
                f"none of the {len(self.boards)} boards answered within {self.config.startup_wait_s:.0f}s "
                f"({', '.join(b.name + '=' + b.address for b in self.boards)}): start the agents first "
                "(systemctl start npudure-agent on each board) or fix the addresses in the scheduler config"
            )
        await asyncio.gather(*(m.poll_status() for m in self.monitors if not m.board.down))

    def start_monitors(self) -> None:
        self._tasks = [asyncio.create_task(m.run()) for m in self.monitors]
        self._state_changed()

    async def close(self) -> None:
        await self.membership.close()
        await self.serving.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for board in self.boards:
            for channel in board.channels:
                await channel.close()


async def _start_http_api(scheduler: Scheduler, reuse_port: bool) -> http_api.HttpApi | None:
    """The DeepStack-compatible HTTP API, when configured. Imported only then: aiohttp alone is most
    of the scheduler's import time, and a restart is without a scheduler for as long as it imports."""
    if scheduler.config.http_api is None:
        return None
    from npudure.scheduler import http_api

    return await http_api.start(scheduler, reuse_port)


async def _start_zmq_api(scheduler: Scheduler, handing_over: bool) -> zmq_api.ZmqEndpoints | None:
    """Frigate's zmq endpoint, when configured (pyzmq imported only then). A successor waits for its
    predecessor to let the port go: libzmq cannot share a port (no SO_REUSEPORT)."""
    if scheduler.config.zmq_api is None:
        return None
    from npudure.scheduler import zmq_api

    wait_s = scheduler.config.shutdown.drain_s + scheduler.config.shutdown.grace_s if handing_over else 0.0
    return await zmq_api.start(scheduler, wait_s)


def _log_zmq_failure(task: asyncio.Task[zmq_api.ZmqEndpoints | None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("%s", task.exception())


async def _started(task: asyncio.Task[zmq_api.ZmqEndpoints | None]) -> zmq_api.ZmqEndpoints | None:
    """The zmq endpoint if it started; a start still waiting for the port is given up."""
    if not task.done():
        task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return None if task.cancelled() or task.exception() is not None else task.result()


def handover_settings(config: SchedulerConfig) -> HandoverSettings | None:
    """Handover needs the pid file (beside the state file): without a state folder there is none."""
    state = state_path(config.state_file)
    if state is None:
        return None
    # The successor checks its boards before it serves: give it that and the start-up beside it.
    return HandoverSettings(state.parent / handover.PID_NAME, timeout_s=config.startup_wait_s + 60.0)


async def serve(
    config: SchedulerConfig,
    ready: asyncio.Event | None = None,
    config_path: str | None = None,
) -> None:
    log.info("starting on %s with %d boards", config.listen, len(config.boards))
    settings = handover_settings(config)
    # SecurityError (a token or certificate file) is a configuration error
    scheduler = Scheduler(config, config_path)
    inflight = len(config.boards) * config.board_max_inflight
    # SO_REUSEPORT only with the pid file's lock: a successor shares the port for the handover, while
    # a second scheduler started by mistake is refused by the lock (handover.AlreadyRunning).
    options = [("grpc.so_reuseport", 1)] if settings is not None else SERVER_OPTIONS
    revoked = [RevocationCheck(scheduler.revocations)] if scheduler.revocations else []
    server = grpc_limits.server(
        config.limits, config.max_message_bytes, config.queue_limit + inflight, options, revoked
    )
    lifecycle = Lifecycle(server, scheduler.health, config.shutdown, settings)
    scheduler.handing_over = lambda: lifecycle.frozen
    try:
        lifecycle.claim()
    except BaseException:
        await scheduler.close()
        raise
    server.add_generic_rpc_handlers((scheduler.inference_handler(),))
    rpc.add_ClusterServicer_to_server(scheduler, server)
    health_pb2_grpc.add_HealthServicer_to_server(scheduler.health, server)
    reflection.enable_server_reflection(SERVICE_NAMES, server)
    # The port first, the boards' first health checks after: a restart leaves central clients without
    # a scheduler only while the new process imports and reads its config. Until the checks answer,
    # the configured boards count as UP (as they were: drains come from the state file), and a request
    # that meets a dead one is retried on another; the checks then take it out.
    http = None
    try:
        port = security.add_port(server, config.listen, config.tls)
        await server.start()
        await scheduler.wait_for_boards()
        scheduler.start_monitors()
        http = await _start_http_api(scheduler, lifecycle.reuse_port)
        # A successor binds the zmq port in the background, once its predecessor lets it go.
        successor = handover.predecessor() is not None
        zmq_start = asyncio.create_task(_start_zmq_api(scheduler, successor))
        if successor:
            zmq_start.add_done_callback(_log_zmq_failure)
        else:
            await asyncio.shield(zmq_start)  # a port in use stops start-up, as for gRPC and HTTP
    except BaseException:
        if http is not None:
            await http.stop()
        await server.stop(grace=0)
        await scheduler.close()
        lifecycle.release()
        raise
    connections = asyncio.create_task(grpc_limits.watch_connections(port, config.limits))
    metrics = scheduler.metrics.serve(
        config.listen, config.metrics_port, config.metrics_listen, config.tls, lifecycle.reuse_port
    )
    for name in ("", contract.INFERENCE):
        await scheduler.health.set(name, health_pb2.HealthCheckResponse.SERVING)
    log.info(
        "scheduler serving on %s: %d boards, policy %s, %d connection(s) per board",
        config.listen,
        len(scheduler.boards),
        config.policy,
        config.connections_per_board,
    )
    if ready:
        ready.set()

    async def close_listeners() -> None:
        # New HTTP and metrics connections go to the successor from now on.
        if metrics is not None:
            await asyncio.to_thread(metrics_http.close, metrics)
        if http is not None:
            await http.close_listener()
        endpoint = await _started(zmq_start)
        if endpoint is not None:  # answers what it holds, then lets the successor bind the port
            await endpoint.close()

    lifecycle.on_handed_over = close_listeners
    await lifecycle.serving(f"serving on {config.listen}")
    try:
        await lifecycle.run()
    finally:
        connections.cancel()
        await lifecycle.stop()
        log.info("stopped serving; closing the board channels")
        if http is not None:
            await http.stop()
        endpoint = await _started(zmq_start)
        if endpoint is not None:
            await endpoint.close()
        await scheduler.close()
        log.info("stopped")
