"""``npudure admin``: the operator's calls a rolling change is made of.

    npudure admin drain      --target SCHEDULER --node board1   # no new requests for board1
    npudure admin undrain    --target SCHEDULER --node board1   # back in rotation
    npudure admin wait-idle  --target AGENT                     # until the board holds no request
    npudure admin wait-state --target SCHEDULER --node board1 --state UP

The admin calls carry the fleet's credentials from the environment, as every npudure client
(NPUDURE_ADMIN_TOKEN_FILE, NPUDURE_TLS_*; npudure.security.access). drain/undrain repeat the call for
up to 30 s while the scheduler answers UNAVAILABLE (handing over to a new process, or restarting)
or CANCELLED (the old process stopped with the call in flight).
Exit codes: 0 done, 1 failed or timed out (one line on stderr saying what was seen), 3 the scheduler
has no board of that name (the roll treats a board the scheduler does not know yet as one that needs
no drain).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import grpc

from npudure.argtypes import positive
from npudure.client.handover_retry import retrying
from npudure.proto import inference_pb2 as pb
from npudure.proto import inference_pb2_grpc as rpc
from npudure.security import access as security

EXIT_UNKNOWN_NODE = 3
# The scheduler did not answer at all (after the handover retries): nothing is routed through it, so a
# board's restart needs no drain (roles/npudure_agent/tasks/restart.yml takes this code so).
EXIT_UNREACHABLE = 4
Reply = TypeVar("Reply")  # what a wait polls: NodeStatus, ClusterStatus


class AdminError(Exception):
    """A failed admin step, in the operator's words; ``code`` is the exit code."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def _rpc_error(target: str, what: str, exc: grpc.RpcError) -> AdminError:
    if exc.code() == grpc.StatusCode.NOT_FOUND:
        return AdminError(f"{target}: {exc.details()}", EXIT_UNKNOWN_NODE)
    if exc.code() == grpc.StatusCode.UNAVAILABLE:
        return AdminError(
            f"{target}: {what}: the scheduler is not answering ({exc.details()})", EXIT_UNREACHABLE
        )
    return AdminError(f"{target}: {what}: {exc.code().name}: {exc.details()}{security.tls_hint(exc)}")


def set_drain(channel: grpc.Channel, node: str, drain: bool, timeout_s: float) -> pb.ClusterStatus:
    """DrainNode, repeated while the scheduler hands over or restarts (UNAVAILABLE, bounded)."""
    request = pb.DrainNodeRequest(node=node, drain=drain)
    status: pb.ClusterStatus = retrying(
        lambda: rpc.ClusterStub(channel).DrainNode(request, timeout=timeout_s)
    )
    return status


def board_state(status: pb.ClusterStatus, node: str) -> str | None:
    """``UP``, ``DOWN``, ``DRAINING``... for ``node``; None when the scheduler has no such board."""
    for board in status.boards:
        if board.name == node:
            return pb.BoardState.Name(board.state).removeprefix("BOARD_STATE_")
    return None


@dataclass(frozen=True)
class Idle:
    """What the agent reported when the wait ended."""

    idle: bool
    in_flight: int
    queued: int
    reasons: tuple[str, ...]


def idle_reading(status: pb.NodeStatus, reason: str | None) -> Idle:
    """Idle: nothing in flight or queued and, when ``reason`` is given, the board already tells
    proxyless clients to stay away for that reason (so no new request is on its way)."""
    reasons = tuple(status.not_serving_reasons)
    ok = status.in_flight == 0 and status.queue_depth == 0 and (reason is None or reason in reasons)
    return Idle(ok, status.in_flight, status.queue_depth, reasons)


def poll_until(
    read: Callable[[], tuple[bool, str]],
    timeout_s: float,
    interval_s: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """Calls ``read`` (-> done, what it saw) until done or ``timeout_s``; returns the last sighting.
    Raises AdminError with that sighting on timeout."""
    deadline = clock() + timeout_s
    while True:
        done, seen = read()
        if done:
            return seen
        if clock() >= deadline:
            raise AdminError(f"still {seen} after {timeout_s:g} s")
        sleep(interval_s)


def _drain(args: argparse.Namespace, drain: bool) -> str:
    with security.channel(args.target) as channel:
        try:
            status = set_drain(channel, args.node, drain, args.timeout)
        except grpc.RpcError as exc:
            raise _rpc_error(args.target, "DrainNode", exc) from None
    return f"{args.node}: {board_state(status, args.node)}"


def _wait(
    args: argparse.Namespace,
    call: Callable[[grpc.Channel], Reply],
    judge: Callable[[Reply], tuple[bool, str]],
    unreachable: str,
    not_done: str,
) -> str:
    """Poll ``call`` on ``args.target`` until ``judge`` says done (-> what it saw); an RpcError is a
    sighting ("<unreachable> (CODE)"), not the end; on timeout one line: "<target>: <not_done>: ...".
    An AdminError that ``judge`` raises with EXIT_UNKNOWN_NODE ends the wait as it is."""
    with security.channel(args.target) as channel:

        def read() -> tuple[bool, str]:
            try:
                reply = call(channel)
            except grpc.RpcError as exc:
                return False, f"{unreachable} ({exc.code().name})"
            return judge(reply)

        try:
            return poll_until(read, args.timeout, args.interval)
        except AdminError as exc:
            if exc.code == EXIT_UNKNOWN_NODE:
                raise
            raise AdminError(f"{args.target}: {not_done}: {exc}") from None


def _wait_idle(args: argparse.Namespace) -> str:
    def judge(status: pb.NodeStatus) -> tuple[bool, str]:
        reading = idle_reading(status, args.reason)
        reasons = ",".join(reading.reasons) or "none"
        return reading.idle, (
            f"{reading.in_flight} in flight, {reading.queued} queued, not-serving reasons {reasons}"
        )

    seen = _wait(
        args,
        lambda channel: rpc.NodeStub(channel).GetStatus(pb.NodeStatusRequest(), timeout=3),
        judge,
        "unreachable",
        "not idle",
    )
    return f"{args.target}: idle ({seen})"


def _wait_state(args: argparse.Namespace) -> str:
    wanted = {s.strip().upper() for s in args.state.split(",") if s.strip()}

    def judge(status: pb.ClusterStatus) -> tuple[bool, str]:
        state = board_state(status, args.node)
        if state is None:
            raise AdminError(
                f"{args.target}: the scheduler has no board named {args.node}", EXIT_UNKNOWN_NODE
            )
        return state in wanted, state

    seen = _wait(
        args,
        lambda channel: rpc.ClusterStub(channel).GetClusterStatus(pb.ClusterStatusRequest(), timeout=3),
        judge,
        "the scheduler unreachable",
        f"board {args.node} not {'/'.join(sorted(wanted))}",
    )
    return f"{args.node}: {seen}"


COMMANDS: dict[str, tuple[str, Callable[[argparse.Namespace], str]]] = {
    "drain": (
        "take a board out of rotation on the scheduler (it finishes what it holds)",
        lambda a: _drain(a, True),
    ),
    "undrain": ("put a drained board back in rotation", lambda a: _drain(a, False)),
    "wait-idle": ("wait until an agent holds no request (in flight or queued)", _wait_idle),
    "wait-state": ("wait until the scheduler reports a board in one of the given states", _wait_state),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="admin_command", metavar="ACTION", required=True)
    for name, (help_text, _) in COMMANDS.items():
        cmd = sub.add_parser(name, help=help_text, description=help_text)
        agent = name == "wait-idle"
        cmd.add_argument(
            "--target",
            default="127.0.0.1:50051" if agent else "127.0.0.1:50050",
            help="the agent's host:port" if agent else "the scheduler's host:port",
        )
        if not agent:
            cmd.add_argument("--node", required=True, help="board name, as the scheduler lists it")
        if name == "wait-state":
            cmd.add_argument("--state", default="UP", help="comma-separated states to wait for (default UP)")
        if name == "wait-idle":
            cmd.add_argument(
                "--reason",
                default=None,
                help="also wait until the board reports this not-serving reason (e.g. drained)",
            )
        waits = name.startswith("wait-")
        cmd.add_argument(
            "--timeout",
            type=positive,
            default=60.0 if waits else 5.0,
            help="seconds to wait (default 60)" if waits else "the call's deadline, s (default 5)",
        )
        if waits:
            cmd.add_argument(
                "--interval", type=positive, default=0.2, help="seconds between polls (default 0.2)"
            )


def run(args: argparse.Namespace) -> int:
    _, action = COMMANDS[args.admin_command]
    try:
        print(action(args))
    except (AdminError, security.SecurityError) as exc:
        print(f"npudure admin {args.admin_command}: {exc}", file=sys.stderr)
        return getattr(exc, "code", 1)
    return 0
