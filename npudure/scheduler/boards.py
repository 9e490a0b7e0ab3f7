"""One board as the scheduler sees it: its channels, the counters it owns, and its health.

The counters (in_flight, ewma_service_s) are the scheduler's own and are what policies score on.
``last_status`` is polled and may be a poll interval old: it decides exclusion (temperature) and feeds
the deliberately stale ``heartbeat_least_queue`` policy, never the other policies' scores.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from npudure.config import BoardConfig, SchedulerConfig
from npudure.proto import contract
from npudure.proto import inference_pb2 as pb
from npudure.proto import inference_pb2_grpc as rpc
from npudure.security import access as security

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Board:
    index: int
    name: str
    address: str
    max_in_flight: int
    channels: list[grpc.aio.Channel] = field(default_factory=list)
    in_flight: int = 0
    ewma_service_s: float | None = None
    # Mean absolute deviation of the service time (EWMA, as TCP keeps its round-trip variance): a
    # frame's time varies, and the mean is only the middle of it.
    ewma_service_dev_s: float = 0.0
    active: bool = True
    draining: bool = False
    down: bool = False
    hot: bool = False
    consecutive_failures: int = 0
    good_checks: int = 0
    served: int = 0
    failures: int = 0
    last_status: pb.NodeStatus | None = None
    last_status_at: float = 0.0
    # When a health check last got SERVING (monotonic): the board's own word that it is alive, which
    # tells a request that ran out of time on a working board from a board that stopped answering.
    serving_seen_at: float = 0.0
    # The scheduler config's list for this board (None: not given), used until the board reports its own.
    configured_models: tuple[str, ...] | None = None
    _next_channel: int = 0
    # (the status the names were read from, its names): read once per poll, not once per request.
    _reported: tuple[pb.NodeStatus | None, tuple[str, ...]] = (None, ())

    # ------------------------------------------------------------------ placement (scheduler.placement)
    @property
    def model_names(self) -> tuple[str, ...] | None:
        """The models the board serves, its default first; None when neither it nor the config said."""
        status = self.last_status
        if status is None:
            return self.configured_models
        if self._reported[0] is not status:  # holding the status keeps its identity from being reused
            names = tuple(m.name for m in sorted(status.models, key=lambda m: not m.default))
            self._reported = (status, names)
        return self._reported[1] or self.configured_models

    # ------------------------------------------------------------------ what policies read
    @property
    def parallelism(self) -> int:
        """Frames the board serves at once: its contexts (older agents report only npu_cores, which was
        their context count), 1 until it has reported."""
        status = self.last_status
        return (status.contexts or status.npu_cores or 1) if status else 1

    def expected_completion_s(self) -> float | None:
        """How long a request sent now (already counted in ``in_flight``) may take on this board: its
        service time plus twice its deviation (as TCP's retransmit timeout bounds a round trip), once
        per round of ``parallelism`` requests ahead of it and itself. With the mean alone, a third of the
        frames started near their deadline under overload finished after it (Frigate had gone: board
        time spent for nobody; benchmarks/frigate_overload.py). None before the board has answered."""
        if self.ewma_service_s is None:
            return None
        rounds = -(-self.in_flight // max(1, self.parallelism))  # ceil
        return (self.ewma_service_s + 2 * self.ewma_service_dev_s) * max(1, rounds)

    def answered_lately(self, since: float, within_s: float) -> bool:
        """Whether a health check got SERVING after ``since`` and within the last ``within_s``: a board
        still answering when a request timed out is slow or busy; one that answered only just after the
        request left, and then went quiet (a pulled cable), is not."""
        return self.serving_seen_at > max(since, time.monotonic() - within_s)

    @property
    def polled_load(self) -> int:
        status = self.last_status
        return status.in_flight + status.queue_depth if status else 0

    # ------------------------------------------------------------------ state
    @property
    def eligible(self) -> bool:
        return self.active and not self.draining and not self.down and not self.hot

    @property
    def state(self) -> pb.BoardState:
        if not self.active:
            return pb.BOARD_STATE_INACTIVE
        if self.down:
            return pb.BOARD_STATE_DOWN
        if self.draining:
            return pb.BOARD_STATE_DRAINING
        if self.hot:
            return pb.BOARD_STATE_HOT
        return pb.BOARD_STATE_UP

    def next_call(self) -> grpc.aio.UnaryUnaryMultiCallable:
        """The raw-bytes Infer call on the next pooled connection (round robin over connections)."""
        channel = self.channels[self._next_channel % len(self.channels)]
        self._next_channel += 1
        return channel.unary_unary(contract.INFER_METHOD)

    def record_success(self, service_s: float, alpha: float) -> None:
        self.served += 1
        self.consecutive_failures = 0
        prev = self.ewma_service_s
        if prev is not None:
            self.ewma_service_dev_s += alpha * (abs(service_s - prev) - self.ewma_service_dev_s)
        self.ewma_service_s = service_s if prev is None else prev + alpha * (service_s - prev)

    def record_failure(self, threshold: int, why: str) -> None:
        self.failures += 1
        self.consecutive_failures += 1
        if not self.down and self.consecutive_failures >= threshold:
            self.down = True
            self.good_checks = 0
            log.warning(
                "board %s (%s) marked DOWN after %d consecutive failures: %s",
                self.name,
                self.address,
                self.consecutive_failures,
                why,
            )

    def record_check_while_down(self, serving: bool, threshold: int) -> bool:
        """Count a DOWN board's health check; True when ``threshold`` good ones in a row bring it back UP."""
        self.good_checks = self.good_checks + 1 if serving else 0
        if self.good_checks < threshold:
            return False
        self.down = False
        self.consecutive_failures = 0
        log.warning(
            "board %s (%s) is back UP after %d good health checks", self.name, self.address, self.good_checks
        )
        return True

    def to_proto(self) -> pb.BoardStatus:
        return pb.BoardStatus(
            name=self.name,
            address=self.address,
            state=self.state,
            in_flight=self.in_flight,
            max_in_flight=self.max_in_flight,
            ewma_service_ms=(self.ewma_service_s or 0.0) * 1e3,
            served_total=self.served,
            failures_total=self.failures,
            consecutive_failures=self.consecutive_failures,
            last_status=self.last_status,
            last_status_age_s=time.monotonic() - self.last_status_at if self.last_status else 0.0,
        )


def open_board(
    index: int, board: BoardConfig, config: SchedulerConfig, tokens: security.AdminTokens | None = None
) -> Board:
    """A board's channels; with ``tokens`` (the scheduler's own, reloaded in place) its admin calls
    carry the first of them at each call, so a rotated token reaches the boards without a restart."""
    options = [
        *contract.message_size_options(config.max_message_bytes),
        # Separate TCP connections per channel: otherwise gRPC shares one subchannel between them.
        ("grpc.use_local_subchannel_pool", 1),
        # Come back quickly after a board restarts instead of backing off for up to two minutes.
        *contract.reconnect_options(),
    ]
    token = None
    if tokens is None and config.admin.token_file:
        token = security.read_token(config.admin.token_file)
    channels = [
        security.aio_channel(
            board.address,
            options,
            tls=config.tls,
            token=token,
            tokens=tokens,
            from_env=False,
            token_methods=security.NODE_ADMIN_METHODS,  # not on Infer, health checks, status polls
        )
        for _ in range(config.connections_per_board)
    ]
    return Board(
        index,
        board.name,
        board.address,
        config.board_max_inflight,
        channels,
        configured_models=tuple(board.models) if board.models else None,
    )


class BoardMonitor:
    """Health checks (fast, decide up/down) and status polls (telemetry, temperature) for one board."""

    def __init__(
        self,
        board: Board,
        config: SchedulerConfig,
        on_change: Callable[[], None],
        # Called with the board after each successful status poll (proxyless health).
        on_status: Callable[[Board], None] | None = None,
    ) -> None:
        self.board = board
        self.config = config
        self._on_change = on_change
        self._on_status = on_status
        channel = board.channels[0]
        self._health = health_pb2_grpc.HealthStub(channel)
        self._node = rpc.NodeStub(channel)

    @property
    def node(self) -> rpc.NodeStub:
        return self._node

    async def check_once(self) -> str:
        """ "serving", "not_serving" (the board says so) or "unreachable"."""
        try:
            reply = await self._health.Check(  # type: ignore[attr-defined]  # the stubs omit Check (set in __init__)
                health_pb2.HealthCheckRequest(service=""), timeout=max(1.0, self.config.health_interval_s)
            )
        except grpc.aio.AioRpcError as exc:
            # At its call cap (limits.max_concurrent_rpcs) the board still answered: alive, and full.
            if exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                return "serving"
            return "unreachable"
        if reply.status != health_pb2.HealthCheckResponse.SERVING:
            return "not_serving"
        self.board.serving_seen_at = time.monotonic()
        return "serving"

    async def poll_status(self) -> None:
        try:
            status = await self._node.GetStatus(pb.NodeStatusRequest(), timeout=2.0)
        except grpc.aio.AioRpcError:
            return
        board = self.board
        board.last_status, board.last_status_at = status, time.monotonic()
        limit = self.config.thermal_limit_c
        temps = [r.value for r in status.telemetry.thermal_c if r.HasField("value")]
        hottest = max(temps, default=None)
        was_hot = board.hot
        if limit is not None and hottest is not None:
            # 5 degrees of hysteresis so a board at the limit does not flap.
            board.hot = hottest > limit or (was_hot and hottest > limit - 5)
        else:
            board.hot = False
        if board.hot != was_hot:
            log.warning(
                "board %s %s the temperature limit (%.1f C, limit %s C)",
                board.name,
                "over" if board.hot else "back under",
                hottest or 0.0,
                limit,
            )
            self._on_change()
        if self._on_status:
            self._on_status(board)

    async def run(self) -> None:
        """Health checks and status polls, each on its own clock: a status poll that waits out its
        timeout on a frozen board must not delay the health checks that take that board out."""
        status = asyncio.create_task(self._poll_status_forever())
        try:
            await self._check_health_forever()
        finally:
            status.cancel()

    async def _poll_status_forever(self) -> None:
        while True:
            await self.poll_status()
            await asyncio.sleep(self.config.status_interval_s)

    async def _check_health_forever(self) -> None:
        board, config = self.board, self.config
        while True:
            health = await self.check_once()
            if board.down:
                if board.record_check_while_down(health == "serving", config.recovery_checks):
                    self._on_change()
            elif health == "not_serving":
                # The board itself says it is not serving (e.g. a hung NPU worker): take it out now.
                board.record_failure(1, "its health check reports NOT_SERVING")
            elif health == "unreachable":
                board.record_failure(config.failure_threshold, "health check got no answer")
            await asyncio.sleep(config.health_interval_s)
