"""Frigate's native remote detector (`type: zmq`), served by the scheduler on a port of its own.

A ROUTER socket on the scheduler's own event loop (pyzmq's asyncio sockets): many Frigate detectors (REQ
sockets, one request in flight each) are served at once, and each frame takes the gRPC path's own
dispatcher — same policy, queue, retries, drains and failover, no extra hop: the tensor goes to a board as
a raw frame (npudure/scheduler/zmq_tensor.py reads it).

Every request gets a reply, even one this endpoint cannot serve: a REQ socket without an answer stalls
that Frigate detector until its timeout. The reply is then all zeros ("nothing found"), and one
rate-limited log line names the problem. A request carries Frigate's deadline (``request_timeout_ms``,
200 ms as Frigate's default): past it, Frigate has already given the frame up, so the dispatcher drops
the request wherever it waits and the board never works for a client that has gone.

Messages above the scheduler's ``max_message_bytes`` are cut off by libzmq itself (``MAXMSGSIZE``: the
peer is disconnected before the bytes are held), and at most ``max_concurrency`` frames are worked on at
once; beyond that a frame is answered with zeros at once (Frigate counts it as empty, as on a timeout).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import socket as stdlib_socket
import time
import uuid
from collections.abc import Sequence
from typing import Protocol

import grpc
import zmq
import zmq.asyncio

from npudure.config import SchedulerConfig, ZmqApiConfig
from npudure.proto import inference_pb2 as pb
from npudure.scheduler import zmq_tensor
from npudure.scheduler.dispatch import Dispatcher, DispatchError
from npudure.scheduler.metrics import SchedulerMetrics
from npudure.security.access import ListenError
from npudure.service.handlers import RateLimitedLog

log = logging.getLogger(__name__)

METHOD = "zmq_detection"  # the method label of npudure_scheduler_requests_total
# Room for the JSON header and the framing beside the largest tensor a board takes.
HEADER_SLACK_BYTES = 64 * 1024
# A handover's successor binds once the old process lets the port go (libzmq has no SO_REUSEPORT).
BIND_RETRY_S = 0.05


class Scheduler(Protocol):
    """What the endpoint uses of npudure.scheduler.server.Scheduler (named here: no import cycle)."""

    config: SchedulerConfig
    metrics: SchedulerMetrics
    dispatch: Dispatcher


def netlink_allowed() -> bool:
    """Whether this process may open a netlink socket (a sandbox's RestrictAddressFamilies= can forbid
    it). libzmq's bind resolves its address by listing the interfaces (getifaddrs, over netlink) and
    aborts the whole process on the refusal, so this is asked first."""
    try:
        probe = stdlib_socket.socket(stdlib_socket.AF_NETLINK, stdlib_socket.SOCK_RAW, 0)  # NETLINK_ROUTE
    except OSError:
        return False
    probe.close()
    return True


def zmq_endpoint(scheduler: SchedulerConfig, api: ZmqApiConfig, model: str = "") -> str:
    """``tcp://HOST:PORT`` an endpoint binds: ``listen`` (or the scheduler's listen host at ``port``);
    a model's own endpoint is on the same host at that model's port (``models``)."""
    if api.listen:
        host, _, port = api.listen.rpartition(":")
    else:
        host, port = scheduler.listen.rpartition(":")[0], str(api.port)
    return f"tcp://{host}:{api.models[model] if model else port}"


class ZmqApi:
    """One ROUTER socket; its frames go to ``model`` ("" = the cluster's default)."""

    def __init__(self, scheduler: Scheduler, config: ZmqApiConfig, model: str = "") -> None:
        self.scheduler = scheduler
        self.config = config
        self.model = model
        self.endpoint = zmq_endpoint(scheduler.config, config, model)
        self.active = 0
        self._context = zmq.asyncio.Context()
        self._socket: zmq.asyncio.Socket | None = None
        self._receiver: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._log = RateLimitedLog(log)
        self._counters = {
            code.name: scheduler.metrics.requests_by_method.labels(code.name, METHOD)
            for code in grpc.StatusCode
        }

    # ------------------------------------------------------------------ lifecycle
    async def start(self, wait_for_port_s: float = 0.0) -> None:
        """Bind (retrying for up to ``wait_for_port_s`` while a predecessor still holds the port)."""
        if not netlink_allowed():
            raise ListenError(
                f"cannot serve Frigate's zmq detector on {self.endpoint}: this process may not open a "
                "netlink socket, which libzmq needs to bind (it lists the network interfaces, and aborts "
                "the process when it cannot): allow AF_NETLINK (systemd RestrictAddressFamilies=) or "
                "turn zmq_api off"
            )
        socket = self._context.socket(zmq.ROUTER)
        socket.setsockopt(zmq.LINGER, 0)
        socket.setsockopt(zmq.MAXMSGSIZE, self.scheduler.config.max_message_bytes + HEADER_SLACK_BYTES)
        # Replies to a peer that has gone (Frigate reset its socket after a timeout) are dropped.
        socket.setsockopt(zmq.ROUTER_MANDATORY, 0)
        deadline = time.monotonic() + wait_for_port_s
        while True:
            try:
                socket.bind(self.endpoint)
                break
            except zmq.ZMQError as exc:
                if exc.errno == zmq.EADDRINUSE and time.monotonic() < deadline:
                    await asyncio.sleep(BIND_RETRY_S)
                    continue
                socket.close(linger=0)
                raise ListenError(
                    f"cannot serve Frigate's zmq detector on {self.endpoint}: {exc.strerror} "
                    "(zmq_api.port or zmq_api.listen in the scheduler config)"
                ) from None
        self._socket = socket
        self._receiver = asyncio.create_task(self._receive(socket))
        log.info(
            "Frigate zmq detector endpoint on %s%s",
            self.endpoint,
            f" (model {self.model})" if self.model else "",
        )

    async def close(self) -> None:
        """Stop taking frames, answer those in flight (bounded by their deadline), let the port go."""
        if self._receiver is not None:
            self._receiver.cancel()
            await asyncio.gather(self._receiver, return_exceptions=True)
            self._receiver = None
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=self.config.request_timeout_ms / 1000 + 1.0)
        if self._socket is not None:
            self._socket.close(linger=0)
            self._socket = None
        if not self._context.closed:
            self._context.term()

    # ------------------------------------------------------------------ requests
    async def _receive(self, socket: zmq.asyncio.Socket) -> None:
        while True:
            parts = await socket.recv_multipart(copy=False)
            received = time.monotonic()
            envelope, body = _split(parts)
            if envelope is None:
                continue  # not a ROUTER envelope: nothing to answer to
            if self.active >= self.config.max_concurrency:
                self._refuse(
                    socket, envelope, "RESOURCE_EXHAUSTED", "too many frames at once (max_concurrency)"
                )
                continue
            self.active += 1
            task = asyncio.create_task(self._serve(socket, envelope, body, received))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _serve(
        self, socket: zmq.asyncio.Socket, envelope: list[bytes], body: list[memoryview], received: float
    ) -> None:
        try:
            reply, code = await self._answer(body, received)
        finally:
            self.active -= 1
        self._counters[code].inc()
        await socket.send_multipart([*envelope, *reply], copy=False)

    async def _answer(self, body: list[memoryview], received: float) -> tuple[Sequence[bytes], str]:
        """The reply ([header, tensor]) and the request's outcome as a gRPC code name."""
        if len(body) != 2:
            self._log.warn("zmq: a request of %d frames; Frigate sends [header, tensor]", len(body))
            return _zeros("INVALID_ARGUMENT"), "INVALID_ARGUMENT"
        try:
            tensor = zmq_tensor.read_request(body[0], body[1])
        except zmq_tensor.TensorError as exc:
            self._log.warn("zmq: answered zeros: %s", exc)
            return _zeros("INVALID_ARGUMENT"), "INVALID_ARGUMENT"
        request = zmq_tensor.board_request(tensor, f"zmq-{uuid.uuid4().hex[:12]}", self.model)
        deadline = received + self.config.request_timeout_ms / 1000
        try:
            data = await self.scheduler.dispatch.forward(request, deadline, self.model)
        except DispatchError as exc:
            if exc.code != grpc.StatusCode.DEADLINE_EXCEEDED:  # a late frame is Frigate's own timeout
                self._log.warn("zmq: answered zeros: %s", exc)
            return _zeros(exc.code.name), exc.code.name
        except grpc.aio.AioRpcError as exc:
            self._log.warn("zmq: answered zeros: the board refused the frame: %s", exc.details())
            return _zeros(exc.code().name), exc.code().name
        response = pb.InferResponse.FromString(data)
        # The scheduler's whole time for the frame, from its arrival on the socket (the dispatcher's
        # figure starts at the forward).
        response.timing.scheduler_total_us = round((time.monotonic() - received) * 1e6)
        tensor_reply = zmq_tensor.reply(response.detections, tensor.width, tensor.height)
        return [zmq_tensor.reply_header("OK", response), tensor_reply], "OK"

    def _refuse(self, socket: zmq.asyncio.Socket, envelope: list[bytes], code: str, why: str) -> None:
        self._counters[code].inc()
        self._log.warn("zmq: answered zeros: %s", why)
        socket.send_multipart([*envelope, *_zeros(code)], copy=False)


@functools.cache
def _zeros(code: str) -> tuple[bytes, bytes]:
    """Frigate's "nothing found", with the reason in the header: made once per code, since under
    overload most frames get one."""
    return zmq_tensor.reply_header(code), zmq_tensor.EMPTY_REPLY


def _split(parts: list[zmq.Frame]) -> tuple[list[bytes] | None, list[memoryview]]:
    """(routing envelope up to its empty delimiter, the message body). A DEALER peer that sends no
    delimiter gets its identity alone as the envelope."""
    for i, part in enumerate(parts):
        if len(part) == 0:
            return [p.bytes for p in parts[: i + 1]], [p.buffer for p in parts[i + 1 :]]
    if not parts:
        return None, []
    return [parts[0].bytes], [p.buffer for p in parts[1:]]


class ZmqEndpoints:
    """The default model's endpoint and one per model of ``zmq_api.models``, started and closed together."""

    def __init__(self, apis: list[ZmqApi]) -> None:
        self.apis = apis

    async def close(self) -> None:
        await asyncio.gather(*(api.close() for api in self.apis))


async def start(scheduler: Scheduler, wait_for_port_s: float = 0.0) -> ZmqEndpoints | None:
    """Serve the zmq endpoints when the scheduler config has ``zmq_api``; None when it is off. One that
    cannot bind closes those already bound and raises ListenError."""
    config = scheduler.config.zmq_api
    if config is None:
        return None
    started: list[ZmqApi] = []
    try:
        for model in ("", *config.models):
            api = ZmqApi(scheduler, config, model)
            await api.start(wait_for_port_s)
            started.append(api)
    except BaseException:
        await ZmqEndpoints(started).close()
        raise
    return ZmqEndpoints(started)
