"""Helpers for the handover tests: a notify socket as systemd reads it (AF_UNIX datagrams with the
sender's credentials), the operator's command, and a successor stopped by its pid (it is not our child)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import struct
import subprocess
import time
from pathlib import Path

import yaml

from helpers.fleet_ops import scheduler_verb
from npudure.service.handover import running
from npudure_workshop.lab.local import LocalCluster


class NotifySocket:
    """A ``$NOTIFY_SOCKET``: each datagram kept with the pid the kernel says sent it (SO_PASSCRED)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.sock.bind(str(path))
        self.sock.setblocking(False)
        self.messages: list[tuple[int, dict[str, str]]] = []

    def drain(self) -> list[tuple[int, dict[str, str]]]:
        """(sender pid, {field: value}) of every datagram received so far."""
        creds_size = struct.calcsize("3i")
        while True:
            try:
                data, ancillary, _, _ = self.sock.recvmsg(4096, socket.CMSG_SPACE(creds_size))
            except BlockingIOError:
                return self.messages
            pid = 0
            for level, kind, value in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                    pid = struct.unpack("3i", value[:creds_size])[0]
            fields = dict(line.split("=", 1) for line in data.decode().splitlines() if "=" in line)
            self.messages.append((pid, fields))

    def close(self) -> None:
        self.sock.close()


def handover_command(cluster: LocalCluster, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    """What the role's handler runs: ``npudure scheduler --config FILE --handover``."""
    return scheduler_verb(cluster, "--handover", timeout_s)


def stop_pid(pid: int, timeout_s: float = 30.0) -> None:
    """SIGTERM ``pid`` (a successor the test's handover started) and wait for it to exit."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while running(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if running(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def scheduler_config(tmp_path: Path) -> Path:
    """A one-board scheduler config with a state file in ``tmp_path`` (where the pid file goes)."""
    path = tmp_path / "s.yml"
    path.write_text(
        yaml.safe_dump(
            {"boards": [{"name": "b1", "address": "127.0.0.1:1"}], "state_file": str(tmp_path / "state.json")}
        )
    )
    return path
