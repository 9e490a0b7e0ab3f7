"""One service process's life, shared by the agent and the scheduler: tell systemd we serve, ping its
watchdog, wait for SIGTERM (or, where enabled, SIGUSR2: hand over to a successor), stop gracefully.

A stop is NOT_SERVING, ``drain_s`` for health checks to notice, then ``server.stop(grace_s)`` (see
``npudure.service.shutdown``). A stop after a handover skips the drain: there is no one to drain to
but the successor, whose listener already shares the port, so the predecessor closes its own at once
(gRPC sends GOAWAY; clients reconnect to the successor) and lets its calls in flight finish. It sends
no ``STOPPING=1`` either: systemd would take that for the successor, now the main process, stopping.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from grpc_health.v1 import health

from npudure.config import ShutdownConfig
from npudure.service import handover, sdnotify
from npudure.service.shutdown import graceful_stop

log = logging.getLogger(__name__)


@dataclass
class HandoverSettings:
    """Where the pid file lives (locked while serving) and how long a successor may take to serve."""

    pid_file: Path
    timeout_s: float = 120.0
    # What the successor runs (default: this process's own command from the installed interpreter).
    command: list[str] | None = None


@dataclass
class Lifecycle:
    server: grpc.aio.Server
    health: health.aio.HealthServicer
    shutdown: ShutdownConfig
    settings: HandoverSettings | None = None  # None: no handover (SIGUSR2 not handled)
    # Called on the loop right after a handover succeeded, before the gRPC stop (e.g. close the HTTP
    # API's and the metrics' listeners so that new connections go to the successor).
    on_handed_over: Callable[[], Awaitable[None]] | None = None
    handed_over: bool = field(default=False, init=False)
    _pid: handover.PidFile | None = field(default=None, init=False)
    _pinger: asyncio.Task[None] | None = field(default=None, init=False)
    _handing_over: bool = field(default=False, init=False)

    def claim(self) -> None:
        """Before binding: take the pid file's lock (AlreadyRunning when another process serves)."""
        if self.settings is not None:
            self._pid = handover.PidFile(self.settings.pid_file)
            self._pid.acquire()
            if threading.current_thread() is threading.main_thread():
                signal.signal(handover.SIGNAL, signal.SIG_IGN)  # until run(): SIGUSR2 would kill us

    @property
    def frozen(self) -> bool:
        """From the successor's start on (it reads the saved state) until this process exits, unless
        the handover failed: a change to the state made here now would be lost."""
        return self._handing_over or self.handed_over

    @property
    def reuse_port(self) -> bool:
        """Ports shared with a successor (SO_REUSEPORT) only while the pid file's lock guards them."""
        return self.settings is not None

    async def serving(self, status: str) -> None:
        """We serve: READY=1 (and MAINPID= when taking over), the watchdog pings, the predecessor told."""
        successor = handover.predecessor() is not None
        if self._pid is not None:
            self._pid.write()  # from now on a handover may be asked for (run() handles SIGUSR2)
        head = f"MAINPID={os.getpid()}\n" if successor else ""
        sdnotify.notify(f"{head}READY=1\nSTATUS={status}")
        self._pinger = asyncio.create_task(sdnotify.watchdog())
        if successor:
            log.info("handover: serving as pid %d; the previous process stops now", os.getpid())
            handover.tell_predecessor()

    async def run(self) -> None:
        """Serve until SIGTERM/SIGINT, or until a handover (SIGUSR2, when enabled) succeeded."""
        stop = asyncio.Event()
        asked = asyncio.Event()
        if threading.current_thread() is threading.main_thread():
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, stop.set)
            if self.settings is not None:
                loop.add_signal_handler(handover.SIGNAL, asked.set)
        while not stop.is_set():
            waits = [asyncio.create_task(stop.wait()), asyncio.create_task(asked.wait())]
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            for task in waits:
                task.cancel()
            if asked.is_set() and not stop.is_set():
                asked.clear()
                if await self.hand_over():
                    return

    async def hand_over(self) -> bool:
        """Start the successor; True once it serves, False (logged, recorded, still serving) if not."""
        settings = self.settings
        if settings is None or self._handing_over:
            return False
        self._handing_over = True
        status_path = settings.pid_file.with_name(handover.STATUS_NAME)
        lock_fd = self._pid.fd if self._pid is not None else None
        try:
            pid = await handover.spawn_successor(settings.timeout_s, lock_fd, settings.command)
        except handover.HandoverError as exc:
            log.error("handover failed, this process (pid %d) keeps serving: %s", os.getpid(), exc)
            handover.Status(os.getpid(), 0, False, str(exc), time.time()).write(status_path)
            return False
        finally:
            self._handing_over = False
        log.info("handover: pid %d serves; closing this process's listeners", pid)
        handover.Status(os.getpid(), pid, True, "", time.time()).write(status_path)
        self.handed_over = True
        return True

    async def stop(self) -> None:
        """Graceful stop (drain first), or after a handover straight to GOAWAY and the grace."""
        if self._pinger is not None:
            self._pinger.cancel()
        if self.handed_over:
            if self.on_handed_over is not None:
                await self.on_handed_over()
            await graceful_stop(self.server, self.health, self.shutdown.model_copy(update={"drain_s": 0.0}))
        else:
            sdnotify.notify("STOPPING=1")
            await graceful_stop(self.server, self.health, self.shutdown)
        self.release()

    def release(self) -> None:
        """Give the pid file's lock up (at the end, or when the start failed)."""
        if self._pid is not None:
            self._pid.release()
            self._pid = None
