"""The scheduler as control plane: the route proxyless clients use, and the board health it drives.

``build_route`` lists the boards in rotation (active, not drained) with a gRPC target naming them all
and a service config: ``weighted_round_robin`` fed by the boards' ORCA trailers, client-side health
checking of the ``npudure.v1.Inference`` health service, and a retry on UNAVAILABLE with a per-attempt
deadline. Boards that are down, hung or hot stay listed: their health keeps clients away, and they come
back without a route change. ``ServingPusher`` tells each board why the scheduler excludes it (drained,
inactive, hot), so that its health, and hence every proxyless client, follows operator actions.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import json
import logging
import socket
from collections.abc import Sequence

import grpc

from npudure.config import SchedulerConfig
from npudure.proto import contract
from npudure.proto import inference_pb2 as pb
from npudure.proto import inference_pb2_grpc as rpc
from npudure.scheduler import placement
from npudure.scheduler.address import split as split_address
from npudure.scheduler.boards import Board

log = logging.getLogger(__name__)

REFRESH_INTERVAL_S = 1.0
# weighted_round_robin periods: the default 10 s blackout would keep a new board at the mean weight
# for 10 s; 0.2 s is a few dozen reports at a board's rate.
WRR = {"blackoutPeriod": "0.2s", "weightUpdatePeriod": "0.1s", "weightExpirationPeriod": "3s"}


def _duration(seconds: float) -> str:
    return f"{seconds:.3f}".rstrip("0").rstrip(".") + "s"


def service_config(config: SchedulerConfig) -> dict:
    """The gRPC service config for a channel to every board (gRFC A6 retries, A58 WRR, A17 health)."""
    return {
        "loadBalancingConfig": [{"weighted_round_robin": dict(WRR)}, {"round_robin": {}}],
        "healthCheckConfig": {"serviceName": contract.INFERENCE},
        "methodConfig": [
            {
                "name": [{"service": contract.INFERENCE}],
                "timeout": _duration(config.request_timeout_s),
                "maxRequestMessageBytes": config.max_message_bytes,
                "maxResponseMessageBytes": config.max_message_bytes,
                # UNAVAILABLE: the board went away. CANCELLED: what C-core gives an attempt that
                # outlived perAttemptRecvTimeout (a hung board), or a board shutting down mid-call.
                # Inference is idempotent, so trying another board is safe.
                "retryPolicy": contract.retry_policy("0.01s", "0.2s", _duration(config.board_timeout_s)),
            }
        ],
    }


def resolve(address: str) -> str:
    """``host:port`` as ``IP:port`` (IPv6 in brackets): the ipv4:/ipv6: target schemes take literals only."""
    ip, host, port = split_address(address)
    if ip is None:
        infos = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
        ip = ipaddress.ip_address(infos[0][4][0])
    return f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}"


def target_for(resolved: Sequence[str]) -> str:
    """One target naming every board; IPv4 boards among IPv6 ones are written v4-mapped."""
    if all(not r.startswith("[") for r in resolved):
        return "ipv4:" + ",".join(resolved)
    out = []
    for r in resolved:
        if r.startswith("["):
            out.append(r)
        else:
            host, _, port = r.rpartition(":")
            out.append(f"[::ffff:{host}]:{port}")
    return "ipv6:" + ",".join(out)


def in_route(board: Board) -> bool:
    return board.active and not board.draining


def model_routes(listed: Sequence[Board], resolved: dict[str, str]) -> list[pb.RouteModel]:
    """Each model the listed boards serve, with the boards that hold it and a target naming them."""
    default = placement.default_model(listed)
    routes = []
    for name in placement.served(listed) if default is not None else ():
        holders = [b for b in listed if placement.holds(b, name, default)]
        routes.append(
            pb.RouteModel(
                name=name,
                default=name == default,
                boards=[b.name for b in holders],
                target=target_for([resolved[b.name] for b in holders]) if holders else "",
            )
        )
    return routes


def build_route(boards: Sequence[Board], config: SchedulerConfig, resolved: dict[str, str]) -> pb.Route:
    listed = [b for b in boards if in_route(b)]
    entries = [pb.RouteBoard(name=b.name, address=b.address, resolved=resolved[b.name]) for b in listed]
    target = target_for([e.resolved for e in entries]) if entries else ""
    text = json.dumps(service_config(config), sort_keys=True)
    models = model_routes(listed, resolved)
    placed = ";".join(f"{m.name}={','.join(m.boards)}" for m in models)  # a placement change is a new route
    key = f"{target}\n{text}" + (f"\n{placed}" if placed else "")
    version = hashlib.sha256(key.encode()).hexdigest()[:16]
    return pb.Route(
        boards=entries,
        target=target,
        service_config_json=text,
        version=version,
        tls=config.tls is not None,
        max_message_bytes=config.max_message_bytes,
        refresh_interval_s=REFRESH_INTERVAL_S,
        models=models,
    )


def exclusion_reasons(board: Board) -> list[str]:
    """Why the scheduler keeps clients off ``board`` (its own hang and reachability are not ours)."""
    return [
        reason
        for reason, applies in (
            ("inactive", not board.active),
            ("drained", board.draining),
            ("hot", board.hot),
        )
        if applies
    ]


class ServingPusher:
    """Keeps each board's operator reasons equal to the scheduler's: pushed on change, and re-pushed
    when a poll shows the board forgot them (an agent restart, a scheduler restart)."""

    def __init__(self, boards: Sequence[Board]) -> None:
        self.boards = list(boards)
        self._pending: dict[str, asyncio.Task[None]] = {}

    def sync(self, board: Board) -> None:
        """Push if the board's last reported reasons differ from ours (no-op when it agrees)."""
        wanted = exclusion_reasons(board)
        status = board.last_status
        reported = sorted(r for r in status.not_serving_reasons if r != "hung") if status else None
        if reported == wanted or board.name in self._pending:
            return
        task = asyncio.create_task(self._push(board, wanted))
        self._pending[board.name] = task
        task.add_done_callback(lambda _t: self._pending.pop(board.name, None))

    def sync_all(self) -> None:
        for board in self.boards:
            self.sync(board)

    async def _push(self, board: Board, reasons: list[str]) -> None:
        try:
            status = await rpc.NodeStub(board.channels[0]).SetServing(
                pb.SetServingRequest(reasons=reasons), timeout=2.0
            )
        except grpc.aio.AioRpcError as exc:
            # Retried at the next status poll: the board is probably down or restarting.
            log.info("board %s: cannot set serving reasons %s: %s", board.name, reasons, exc.code().name)
            return
        board.last_status = status
        log.info("board %s: serving reasons now %s", board.name, reasons or "none")

    async def close(self) -> None:
        tasks = list(self._pending.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
