"""The data path: reserve a board, forward the request bytes, release on every exit path.

Reserve = policy choice + in-flight increment in one synchronous step (nothing awaits in between, so
on the asyncio loop it is atomic). Release happens in a ``finally``: success, error, timeout,
cancellation and retry all pass through it. When every eligible board is at its pipeline depth the
request waits in a bounded FIFO here instead of piling onto the boards.

A request names its model (``InferRequest.model``, "" = the default): its candidates are the boards
that hold it (npudure.scheduler.placement). The policies score the same per-board in-flight counts
whatever the model, because a board's models share its NPU. Waiters stay first come, first served
within a model; one model's full boards do not hold back another model's waiters.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import random
import time
from dataclasses import dataclass

import grpc
from google.protobuf.message import DecodeError
from prometheus_client import Counter, Gauge, Histogram

from npudure.config import SchedulerConfig
from npudure.proto import contract, wire
from npudure.proto import inference_pb2 as pb
from npudure.scheduler import placement
from npudure.scheduler.boards import Board
from npudure.scheduler.metrics import SchedulerMetrics
from npudure.scheduler.policies import Policy, make_policy

log = logging.getLogger(__name__)

# Board errors that mean "this board, not this request": counted against the board and retried once on
# another. Everything else (INVALID_ARGUMENT for a bad frame or undecodable bytes — the agent parses them —,
# RESOURCE_EXHAUSTED, FAILED_PRECONDITION, ...) is the request's fault: back to the client as is, no retry,
# no penalty. Invariant: a request can never take a board out of rotation. A DEADLINE_EXCEEDED counts only
# when the scheduler's own board_timeout_s bounded the attempt and the board gave no sign of life while
# it ran: a caller's shorter deadline (or a caller cancelling, which cancels the forwarding task itself)
# is the caller's, and a board that answered its health checks SERVING meanwhile was working (an
# expensive frame, a slow board): retried once elsewhere, never counted against it.
BOARD_FAULTS = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.INTERNAL,
    grpc.StatusCode.UNKNOWN,
    grpc.StatusCode.CANCELLED,
}
MAX_ATTEMPTS = 2
# A timed-out board counts as alive when it answered a health check within this many health intervals
# of the timeout: every interval a live board answers one; a cut cable stops them (CI stop 51: with
# "answered since the request left", a check answered just before the cut kept the board in rotation).
ALIVE_CHECKS = 2
STAGES = ("scheduler_queue", "network", "board", "scheduler_total")

# What grpcio answers when a server is at its maximum_concurrent_rpcs (limits.max_concurrent_rpcs): the
# board is full (e.g. stalled uploads from someone else), not faulty, and the request did nothing wrong:
# tried on another board, without a penalty.
CALL_CAP_FULL = "Concurrent RPC limit exceeded"


class DispatchError(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(eq=False)
class _Waiter:
    future: asyncio.Future[Board]
    exclude: frozenset[Board]
    model: str = ""


def model_of(request: bytes) -> str:
    """The model a serialized InferRequest names ("" when none, or when it is no InferRequest: the
    board refuses those bytes with INVALID_ARGUMENT, as before models had names)."""
    try:
        return wire.parse(request).model
    except DecodeError:
        return ""


class Dispatcher:
    def __init__(self, boards: list[Board], config: SchedulerConfig, metrics: SchedulerMetrics) -> None:
        self.boards = boards
        self.config = config
        self.metrics = metrics
        self.policy: Policy = make_policy(config.policy)
        self._waiters: collections.deque[_Waiter] = collections.deque()
        # How many entries of _waiters each model has (done ones too, until they are dropped).
        self._queued: collections.Counter[str] = collections.Counter()
        self._rng = random.Random()
        # Labelled children looked up once: .labels() on the hot path costs a few percent of a core.
        self._gauges: dict[Board, Gauge] = {}
        self._ok: dict[Board, Counter] = {}
        self._stages: dict[Board, dict[str, Histogram]] = {}
        for board in boards:
            self.track(board)
        self.served = 0
        self.retries = 0

    def track(self, board: Board) -> None:
        """Look up ``board``'s metric children (at start, and when a board joins)."""
        metrics = self.metrics
        self._gauges[board] = metrics.in_flight.labels(board.name)
        self._ok[board] = metrics.board_requests.labels(board.name, "OK")
        self._stages[board] = {st: metrics.latency.labels(board.name, st) for st in STAGES}

    def untrack(self, board: Board) -> None:
        """Forget a board that left (its series too: a fleet that changes must not grow the registry)."""
        for table in (self._gauges, self._ok, self._stages):
            table.pop(board, None)
        for metric, labels in (
            (self.metrics.in_flight, [(board.name,)]),
            (self.metrics.board_requests, [(board.name, code.name) for code in grpc.StatusCode]),
            (self.metrics.latency, [(board.name, st) for st in STAGES]),
        ):
            for values in labels:
                with contextlib.suppress(KeyError):
                    metric.remove(*values)

    # ------------------------------------------------------------------ reserve / release
    @property
    def queue_depth(self) -> int:
        return len(self._waiters)

    def _holders(self, model: str) -> list[Board]:
        boards = self.boards
        default = placement.default_model(boards)
        return [b for b in boards if placement.holds(b, model, default)]

    def _try_reserve(self, exclude: frozenset[Board], model: str = "") -> Board | None:
        candidates = [
            b
            for b in self._holders(model)
            if b.eligible and b.in_flight < b.max_in_flight and b not in exclude
        ]
        if not candidates:
            return None
        board = self.policy.choose(candidates)
        board.in_flight += 1
        self._gauges[board].set(board.in_flight)
        return board

    def release(self, board: Board) -> None:
        board.in_flight -= 1
        self._gauges[board].set(board.in_flight)
        self.capacity_changed()

    def _dequeue(self, index: int) -> _Waiter:
        waiter = self._waiters[index]
        del self._waiters[index]
        self._queued[waiter.model] -= 1
        if not self._queued[waiter.model]:
            del self._queued[waiter.model]
        return waiter

    def capacity_changed(self) -> None:
        """Hand freed capacity to waiting requests, oldest first within each model: once a model's
        oldest waiter finds no board, that model's later waiters wait behind it, and the scan stops
        when every model in the queue is blocked (one model: at its first waiter, as a plain FIFO)."""
        blocked: set[str] = set()
        i = 0
        while i < len(self._waiters) and len(blocked) < len(self._queued):
            waiter = self._waiters[i]
            if waiter.future.done():  # timed out or cancelled
                self._dequeue(i)
                continue
            if waiter.model in blocked:
                i += 1
                continue
            board = self._try_reserve(waiter.exclude, waiter.model)
            if board is None:
                blocked.add(waiter.model)
                i += 1
                continue
            self._dequeue(i).future.set_result(board)
        self.metrics.queue_depth.set(len(self._waiters))

    async def acquire(self, exclude: frozenset[Board], deadline: float, model: str = "") -> Board:
        if not self._queued.get(model):  # none of this model's requests wait before it
            board = self._try_reserve(exclude, model)
            if board is not None:
                return board
        holders = self._holders(model)
        if not holders:
            try:
                placement.check_served(self.boards, model)
            except placement.UnknownModel as exc:
                raise DispatchError(grpc.StatusCode.NOT_FOUND, str(exc)) from None
        if not any(b.eligible and b not in exclude for b in holders):
            states = ", ".join(f"{b.name}={contract.board_state_label(b.state)}" for b in holders)
            which = f" that hold model {model!r}" if model else ""
            raise DispatchError(grpc.StatusCode.UNAVAILABLE, f"no board{which} can take requests ({states})")
        if len(self._waiters) >= self.config.queue_limit:
            raise DispatchError(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"scheduler queue is full ({self.config.queue_limit} requests wait for a board); slow down "
                "or raise queue_limit",
            )
        waiter = _Waiter(asyncio.get_running_loop().create_future(), exclude, model)
        self._waiters.append(waiter)
        self._queued[model] += 1
        self.metrics.queue_depth.set(len(self._waiters))
        try:
            return await asyncio.wait_for(
                asyncio.shield(waiter.future), max(0.0, deadline - time.monotonic())
            )
        except (TimeoutError, asyncio.CancelledError) as exc:
            if waiter.future.done() and not waiter.future.cancelled():
                self.release(waiter.future.result())  # reserved for us just as we gave up
            else:
                waiter.future.cancel()
            if isinstance(exc, TimeoutError):
                raise DispatchError(
                    grpc.StatusCode.DEADLINE_EXCEEDED, "deadline passed while waiting for a free board"
                ) from None
            raise

    # ------------------------------------------------------------------ forwarding
    async def forward(self, request: bytes, deadline: float, model: str | None = None) -> bytes:
        """Send the request bytes to one board that holds its model (retry once elsewhere); return the
        response bytes. ``model``: what the request names, when the caller knows (else read from it)."""
        arrived = time.perf_counter()
        model = model_of(request) if model is None else model
        exclude: frozenset[Board] = frozenset()
        queue_s = 0.0
        last_error = ""
        for attempt in range(1, MAX_ATTEMPTS + 1):
            wait_start = time.perf_counter()
            board = await self.acquire(exclude, deadline, model)
            queue_s += time.perf_counter() - wait_start
            try:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise DispatchError(
                        grpc.StatusCode.DEADLINE_EXCEEDED, "deadline passed before a board was free"
                    )
                expected = board.expected_completion_s()
                if expected is not None and remaining < expected:
                    # Work nobody will wait for: the caller gives up before the board could answer (a
                    # Frigate detector's 200 ms under overload). Not started, so the board's time goes
                    # to requests that can still be answered; the request's failure, not the board's.
                    raise DispatchError(
                        grpc.StatusCode.DEADLINE_EXCEEDED,
                        f"{remaining * 1e3:.0f} ms left, and board {board.name} needs about "
                        f"{expected * 1e3:.0f} ms: not started",
                    )
                # Whose clock bounds this attempt: the scheduler's own per-attempt timeout judges the
                # board; a caller's shorter deadline judges only the caller.
                client_bound = remaining < self.config.board_timeout_s
                timeout = min(self.config.board_timeout_s, remaining)
                sent = time.perf_counter()
                sent_at = time.monotonic()
                reply = await board.next_call()(request, timeout=timeout)
                call_s = time.perf_counter() - sent
            except grpc.aio.AioRpcError as exc:
                code = exc.code()
                self.metrics.board_requests.labels(board.name, code.name).inc()
                at_cap = code == grpc.StatusCode.RESOURCE_EXHAUSTED and CALL_CAP_FULL in (exc.details() or "")
                if at_cap and attempt < MAX_ATTEMPTS:
                    exclude = exclude | {board}
                    continue
                if code not in BOARD_FAULTS:
                    raise  # the request's own fault (bad frame, too large): the client gets it as is
                if code == grpc.StatusCode.DEADLINE_EXCEEDED and client_bound:
                    raise DispatchError(  # the caller's deadline, not the board's slowness: no penalty
                        code, f"the caller's deadline passed while board {board.name} worked on it"
                    ) from None
                last_error = f"board {board.name}: {code.name}: {exc.details()}"
                alive = board.answered_lately(sent_at, ALIVE_CHECKS * self.config.health_interval_s)
                if code == grpc.StatusCode.DEADLINE_EXCEEDED and alive:
                    # Still answering its health checks: a slow board or a costly request, not a dead
                    # one. No penalty; tried once more elsewhere (a slow board's requests still get served).
                    last_error = (
                        f"board {board.name} did not finish it within board_timeout_s "
                        f"({self.config.board_timeout_s:g} s) while answering its health checks "
                        "(the request's cost or a slow board, not a board fault)"
                    )
                else:
                    board.record_failure(self.config.failure_threshold, last_error)
                exclude = exclude | {board}
                if attempt < MAX_ATTEMPTS and deadline - time.monotonic() > 0.01:
                    self.retries += 1
                    self.metrics.retries.inc()
                    await asyncio.sleep(
                        min(self._rng.uniform(0.01, 0.1), max(0.0, deadline - time.monotonic()))
                    )
                    continue
                raise DispatchError(
                    code if code != grpc.StatusCode.CANCELLED else grpc.StatusCode.UNAVAILABLE,
                    f"no board answered: {last_error}",
                ) from None
            finally:
                self.release(board)
            return self._finish(board, reply, arrived, queue_s, call_s, attempt)
        raise DispatchError(grpc.StatusCode.UNAVAILABLE, f"no board answered: {last_error}")

    def _finish(
        self, board: Board, reply: bytes, arrived: float, wait_s: float, call_s: float, attempts: int
    ) -> bytes:
        response = pb.InferResponse.FromString(reply)
        timing = response.timing
        board_total_s = timing.board_total_us / 1e6
        service_s = max(0.0, board_total_s - timing.board_queue_us / 1e6)
        board.record_success(service_s if service_s > 0 else call_s, self.config.ewma_alpha)
        self.served += 1
        total_s = time.perf_counter() - arrived
        # Queue = time to get a board (the policy's choice included; microseconds unless all boards are full);
        # route = the scheduler's own remaining time (forwarding, parsing this small reply, retry backoff).
        timing.scheduler_queue_us = round(wait_s * 1e6)
        timing.route_us = max(0, round((total_s - call_s - wait_s) * 1e6))
        timing.network_to_board_us = max(0, round((call_s - board_total_s) * 1e6))
        timing.scheduler_total_us = round(total_s * 1e6)
        response.attempts = attempts
        for stage, seconds in (
            ("scheduler_queue", wait_s),
            ("network", call_s - board_total_s),
            ("board", board_total_s),
            ("scheduler_total", total_s),
        ):
            self._stages[board][stage].observe(max(0.0, seconds))
        self._ok[board].inc()
        return response.SerializeToString()
