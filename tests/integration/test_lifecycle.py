"""The shared serve lifecycle with a fake gRPC server and a real notify socket: what systemd is told
at start, as a successor, and at a stop with and without a handover."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from pathlib import Path

from grpc_health.v1 import health

from npudure.config import ShutdownConfig
from npudure.service import handover
from npudure.service.lifecycle import HandoverSettings, Lifecycle


class FakeServer:
    def __init__(self) -> None:
        self.graces: list[float | None] = []

    async def stop(self, grace: float | None) -> None:
        self.graces.append(grace)


def _notify_socket(tmp_path: Path, monkeypatch) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(tmp_path / "notify"))
    sock.setblocking(False)
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "notify"))
    return sock


def _received(sock: socket.socket) -> list[str]:
    out = []
    while True:
        try:
            out.append(sock.recv(4096).decode())
        except BlockingIOError:
            return out


def _lifecycle(server: FakeServer, settings: HandoverSettings | None = None) -> Lifecycle:
    return Lifecycle(server, health.aio.HealthServicer(), ShutdownConfig(drain_s=0.2, grace_s=3.0), settings)  # type: ignore[arg-type]


def test_a_plain_start_and_stop_say_ready_then_stopping_and_drain(tmp_path, monkeypatch) -> None:
    sock = _notify_socket(tmp_path, monkeypatch)
    server = FakeServer()

    async def main() -> None:
        life = _lifecycle(server)
        await life.serving("serving on x")
        await life.stop()

    asyncio.run(main())
    said = _received(sock)
    assert said[0] == "READY=1\nSTATUS=serving on x"
    assert "MAINPID" not in said[0]
    assert said[-1] == "STOPPING=1"
    assert server.graces == [3.0]


def test_a_successor_says_its_pid_takes_the_pid_file_and_tells_the_predecessor(tmp_path, monkeypatch) -> None:
    sock = _notify_socket(tmp_path, monkeypatch)
    pid_file = tmp_path / handover.PID_NAME
    pid_file.write_text("1\n")
    read_fd, write_fd = os.pipe()
    monkeypatch.setenv(handover.ENV_FD, str(write_fd))
    monkeypatch.setenv(handover.ENV_FROM, "1")

    async def main() -> None:
        life = _lifecycle(FakeServer(), HandoverSettings(pid_file))
        life.claim()
        await life.serving("serving on x")
        life.release()

    asyncio.run(main())
    assert os.read(read_fd, 64) == handover.READY
    os.close(read_fd)
    assert _received(sock)[0] == f"MAINPID={os.getpid()}\nREADY=1\nSTATUS=serving on x"
    assert handover.ENV_FD not in os.environ and handover.ENV_FROM not in os.environ


def test_a_failed_handover_keeps_serving_and_records_why(tmp_path, monkeypatch) -> None:
    pid_file = tmp_path / handover.PID_NAME
    settings = HandoverSettings(pid_file, timeout_s=10, command=["/bin/sh", "-c", "exit 3"])

    async def main() -> bool:
        life = _lifecycle(FakeServer(), settings)
        life.claim()
        try:
            return await life.hand_over()
        finally:
            life.release()

    assert asyncio.run(main()) is False
    status = handover.Status.read(pid_file.with_name(handover.STATUS_NAME))
    assert status is not None and not status.ok and "exited with status 3" in status.reason


def test_after_a_handover_the_stop_skips_the_drain_and_says_no_stopping(tmp_path, monkeypatch) -> None:
    sock = _notify_socket(tmp_path, monkeypatch)
    pid_file = tmp_path / handover.PID_NAME
    ready = "import os; os.write(int(os.environ['NPUDURE_HANDOVER_FD']), b'ready\\n')"
    settings = HandoverSettings(pid_file, timeout_s=20, command=[sys.executable, "-c", ready])
    server = FakeServer()
    closed: list[str] = []

    async def close_listeners() -> None:
        closed.append("listeners")

    async def main() -> None:
        life = _lifecycle(server, settings)
        life.on_handed_over = close_listeners
        life.claim()
        await life.serving("serving on x")
        assert await life.hand_over()
        await life.stop()

    asyncio.run(main())
    assert closed == ["listeners"]
    assert server.graces == [3.0]
    assert not any("STOPPING" in m for m in _received(sock))
    status = handover.Status.read(pid_file.with_name(handover.STATUS_NAME))
    assert status is not None and status.ok and status.successor > 0


def test_the_state_is_frozen_from_the_successors_start_and_thawed_if_the_handover_fails(tmp_path) -> None:
    pid_file = tmp_path / handover.PID_NAME
    gate = tmp_path / "gate"
    # The successor says ready only once the test has looked (the gate file appears).
    wait = f"import os, pathlib, time\nwhile not pathlib.Path({str(gate)!r}).exists(): time.sleep(0.01)\n"
    ready = wait + "os.write(int(os.environ['NPUDURE_HANDOVER_FD']), b'ready\\n')"
    seen: list[bool] = []

    async def attempt(command: list[str]) -> bool:
        life = _lifecycle(FakeServer(), HandoverSettings(pid_file, timeout_s=20, command=command))
        life.claim()
        try:
            seen.append(life.frozen)
            task = asyncio.create_task(life.hand_over())
            await asyncio.sleep(0.3)
            seen.append(life.frozen)  # the successor runs, reading the saved state
            gate.touch()
            ok = await task
            seen.append(life.frozen)
            return ok
        finally:
            life.release()

    assert asyncio.run(attempt([sys.executable, "-c", ready])) is True
    assert seen == [False, True, True]  # after success: frozen until this process exits
    seen.clear()
    gate.unlink()
    failing = [sys.executable, "-c", wait + "raise SystemExit(3)"]
    assert asyncio.run(attempt(failing)) is False
    assert seen == [False, True, False]  # the old process keeps serving and takes changes again
