"""Boards that join and leave a running scheduler (``systemctl reload npudure-scheduler``).

``ReloadBoards`` re-reads the scheduler's own config file. A file that does not validate, a board
whose address does not resolve, a known name with another address: refused with one line, and the
current set keeps serving. Otherwise new boards are opened DOWN and join once their health checks
pass (``recovery_checks`` in a row, as after any outage); removed boards are drained at once (out of
the route, their health NOT_SERVING for proxyless clients) and leave when their requests in flight
have finished. The policy follows the config when ``policy:`` changed; other changed fields wait
for a restart and are named in the reply.

Also the state a restart keeps (npudure.scheduler.state): what is saved and how it is re-applied.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from npudure import config as cfg
from npudure.config import BoardConfig, SchedulerConfig
from npudure.proto import inference_pb2 as pb
from npudure.scheduler import state
from npudure.scheduler.boards import Board, BoardMonitor, open_board
from npudure.scheduler.dispatch import Dispatcher
from npudure.scheduler.metrics import SchedulerMetrics
from npudure.scheduler.policies import make_policy
from npudure.scheduler.route import ServingPusher, resolve
from npudure.security import access as security
from npudure.security.revocation import Revocations

log = logging.getLogger(__name__)

# Fields a reload applies; any other change is reported as needing a restart.
LIVE_FIELDS = ("boards", "policy")


class ReloadError(Exception):
    """A reload that is refused; the message is one line, in the operator's terms."""


class ReloadInterrupted(Exception):
    """A handover began while the reload waited (its successor has read the saved state): the reload
    changed nothing here and is to be retried on the successor."""


@dataclass(frozen=True)
class BoardDiff:
    added: list[BoardConfig]
    removed: list[str]


def one_line(message: str) -> str:
    return "; ".join(part.strip() for part in message.splitlines() if part.strip())


def read_config(path: str | Path) -> SchedulerConfig:
    try:
        return cfg.load(SchedulerConfig, path)
    except cfg.ConfigError as exc:
        raise ReloadError(one_line(str(exc))) from None


def diff_boards(current: dict[str, str], leaving: set[str], wanted: Sequence[BoardConfig]) -> BoardDiff:
    """What to open and what to drain to go from ``current`` (name -> address) to ``wanted``."""
    problems = []
    for board in wanted:
        known = current.get(board.name)
        if known is not None and known != board.address:
            problems.append(
                f"board {board.name} moved from {known} to {board.address}: remove it in one reload "
                "and add it back in the next"
            )
        elif board.name in leaving:
            problems.append(f"board {board.name} is still leaving: reload again once it has left")
    if problems:
        raise ReloadError("; ".join(problems))
    names = {b.name for b in wanted}
    return BoardDiff(
        added=[b for b in wanted if b.name not in current],
        removed=[n for n in current if n not in names and n not in leaving],
    )


def restart_needed(old: SchedulerConfig, new: SchedulerConfig) -> list[str]:
    return [
        name
        for name in type(old).model_fields
        if name not in LIVE_FIELDS and getattr(old, name) != getattr(new, name)
    ]


async def check_addresses(boards: Sequence[BoardConfig]) -> dict[str, str]:
    """Every new board's host resolves (a typo is refused, not added as a board that never comes up);
    name -> IP:port, what GetRoute lists."""
    bad, resolved = [], {}
    for board in boards:
        try:
            resolved[board.name] = await asyncio.to_thread(resolve, board.address)
        except (OSError, ValueError) as exc:
            bad.append(f"board {board.name}: cannot resolve {board.address} ({exc})")
    if bad:
        raise ReloadError("; ".join(bad))
    return resolved


class LeaseLike(Protocol):
    holder: str
    expires: float  # time.monotonic()

    def current(self) -> str: ...


class Host(Protocol):
    """What the membership changes on the scheduler (npudure.scheduler.server.Scheduler)."""

    config: SchedulerConfig
    config_path: str | None
    boards: list[Board]
    by_name: dict[str, Board]
    dispatch: Dispatcher
    serving: ServingPusher
    monitors: list[BoardMonitor]
    metrics: SchedulerMetrics
    admin: security.AdminGuard
    revocations: Revocations | None
    _tasks: list[asyncio.Task[None]]
    _resolved: dict[str, str]
    handing_over: Callable[[], bool]

    @property  # read-only here: a plain attribute would have to be exactly LeaseLike (invariance)
    def lease(self) -> LeaseLike: ...

    def _state_changed(self) -> None: ...


class Membership:
    def __init__(self, host: Host) -> None:
        self.host = host
        self.leaving: set[str] = set()
        self.state_path = state.state_path(host.config.state_file)
        self._lock = asyncio.Lock()
        self._leaves: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------------ state across restarts
    def snapshot(self) -> state.SavedState:
        host = self.host
        holder = host.lease.current()
        return state.SavedState(
            policy=host.dispatch.policy.name,
            config_policy=host.config.policy,
            drained=sorted(b.name for b in host.boards if b.draining and b.name not in self.leaving),
            inactive=sorted(b.name for b in host.boards if not b.active),
            lease_holder=holder,
            lease_until_unix=time.time() + host.lease.expires - time.monotonic() if holder else 0.0,
        )

    def save(self) -> None:
        if self.state_path is None:
            return
        try:
            state.save(self.state_path, self.snapshot())
        except OSError as exc:  # the change itself is made; only its survival of a restart is lost
            log.error("cannot save the scheduler state to %s: %s", self.state_path, exc)

    def restore(self) -> None:
        """Re-apply the saved drains, active set and policy to the configured boards (at start-up)."""
        saved = state.load(self.state_path) if self.state_path else None
        if saved is None:
            return
        host = self.host
        inactive = saved.inactive_among(host.by_name)
        for board in host.boards:
            board.draining = board.name in saved.drained
            board.active = board.name not in inactive
        policy = saved.policy_for(host.config.policy)
        host.dispatch.policy = make_policy(policy)
        left_s = saved.lease_until_unix - time.time()
        if saved.lease_holder and left_s > 0:
            host.lease.holder, host.lease.expires = saved.lease_holder, time.monotonic() + left_s
        log.info(
            "restored from %s: policy %s, drained %s, inactive %s, lease %s",
            self.state_path,
            policy,
            ", ".join(b.name for b in host.boards if b.draining) or "none",
            ", ".join(sorted(inactive)) or "none",
            host.lease.current() or "none",
        )

    # ------------------------------------------------------------------ reload
    async def reload(self) -> pb.ReloadBoardsReply:
        async with self._lock:
            return await self._reload()

    async def _reload(self) -> pb.ReloadBoardsReply:
        host = self.host
        if not host.config_path:
            raise ReloadError("this scheduler was not started from a config file: nothing to reload")
        new = read_config(host.config_path)
        tokens = self._read_tokens()
        revoked = self._read_crl()
        diff = diff_boards({b.name: b.address for b in host.boards}, self.leaving, new.boards)
        resolved = await check_addresses(diff.added)
        if host.handing_over():  # checked before the await too (Scheduler._may_change)
            raise ReloadInterrupted
        old = host.config
        host.config = old.model_copy(update={"boards": new.boards, "policy": new.policy})
        for board in diff.added:
            host._resolved[board.name] = resolved[board.name]  # the route can list it at once
            self._add(board)
        for name in diff.removed:
            self._leave(host.by_name[name])
        for board in new.boards:  # the config's model lists stand in until each board reports its own
            if board.name in host.by_name:
                host.by_name[board.name].configured_models = tuple(board.models) if board.models else None
        policy = ""
        if new.policy != old.policy:
            host.dispatch.policy = make_policy(new.policy)
            policy = new.policy
        restart = restart_needed(old, new)
        host.admin.admin_tokens.values = tokens  # from now on: accepted, and the first sent to the boards
        if host.revocations is not None and revoked is not None:
            host.revocations.apply(revoked)  # from the next call on: a listed client is refused
        host._state_changed()
        self.save()
        log.info(
            "reloaded %s: added %s, removing %s, policy %s, %d admin token(s), %d certificate(s) revoked%s",
            host.config_path,
            ", ".join(b.name for b in diff.added) or "none",
            ", ".join(diff.removed) or "none",
            policy or "unchanged",
            len(tokens),
            len(revoked or ()),
            f"; needs a restart for: {', '.join(restart)}" if restart else "",
        )
        return pb.ReloadBoardsReply(
            added=[b.name for b in diff.added],
            removed=diff.removed,
            policy=policy,
            restart_needed=restart,
            admin_tokens=len(tokens),
            revoked_certificates=len(revoked or ()),
        )

    def _read_crl(self) -> frozenset[int] | None:
        """The CRL re-read (a board's certificate just revoked); a file that is unusable refuses the
        whole reload and the current list stays. None without TLS."""
        revocations = self.host.revocations
        if revocations is None:
            return None
        try:
            return revocations.read()
        except security.SecurityError as exc:
            raise ReloadError(f"{exc}; the scheduler keeps its current revocation list") from None

    def _read_tokens(self) -> list[str]:
        """The admin token file re-read (a rotation's new line, or the old one dropped); a file that
        is unusable refuses the whole reload and the current tokens stay."""
        tokens = self.host.admin.admin_tokens
        if not tokens.path:
            return []
        try:
            return security.read_tokens(tokens.path)
        except security.SecurityError as exc:
            raise ReloadError(f"{exc}; the scheduler keeps its current admin tokens") from None

    def _add(self, config: BoardConfig) -> None:
        host = self.host
        index = max((b.index for b in host.boards), default=-1) + 1
        board = open_board(index, config, host.config, host.admin.admin_tokens)
        # Joins like a board back from an outage: after recovery_checks good health checks in a row.
        board.down = True
        host.boards.append(board)
        host.by_name[board.name] = board
        host.dispatch.track(board)
        host.serving.boards.append(board)
        monitor = BoardMonitor(board, host.config, host._state_changed, host.serving.sync)
        host.monitors.append(monitor)
        host._tasks.append(asyncio.create_task(monitor.run()))
        log.warning(
            "board %s (%s) added: it takes requests once its health checks pass", board.name, board.address
        )

    def _leave(self, board: Board) -> None:
        self.leaving.add(board.name)
        board.draining = True  # out of rotation and of the route; its health turns NOT_SERVING
        log.warning("board %s (%s) removed: draining, it leaves once idle", board.name, board.address)
        task = asyncio.create_task(self._drop_when_idle(board))
        self._leaves.add(task)
        task.add_done_callback(self._leaves.discard)

    async def _drop_when_idle(self, board: Board) -> None:
        host = self.host
        config = host.config
        # Bounded: a request holds a board for at most board_timeout_s per attempt.
        deadline = time.monotonic() + config.request_timeout_s + config.shutdown.drain_s
        # The drain pause first: the serving push reaches the board and proxyless clients move away.
        await asyncio.sleep(config.shutdown.drain_s)
        while board.in_flight > 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if board.in_flight:
            log.warning("board %s leaves with %d request(s) still in flight", board.name, board.in_flight)
        self._drop(board)
        await self._close(board)

    def _drop(self, board: Board) -> None:
        host = self.host
        i = next(i for i, m in enumerate(host.monitors) if m.board is board)
        host.monitors.pop(i)
        host._tasks.pop(i).cancel()
        host.boards.remove(board)
        host.by_name.pop(board.name, None)
        host.serving.boards.remove(board)
        host._resolved.pop(board.name, None)
        host.dispatch.untrack(board)
        for state_name in pb.BoardState.keys()[1:]:
            with contextlib.suppress(KeyError):
                host.metrics.board_up.remove(board.name, state_name[12:])
        self.leaving.discard(board.name)
        host._state_changed()
        log.warning("board %s (%s) has left the scheduler", board.name, board.address)

    @staticmethod
    async def _close(board: Board) -> None:
        for channel in board.channels:
            await channel.close()

    async def close(self) -> None:
        tasks = list(self._leaves)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
