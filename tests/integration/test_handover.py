"""The handover's pieces with small real processes: the pid file's lock, the successor's start and its
failures told in the operator's words, and the requester reading the outcome."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from npudure.service import handover

READY_CHILD = "import os; os.write(int(os.environ['NPUDURE_HANDOVER_FD']), b'ready\\n')"


def test_a_second_process_cannot_take_the_pid_file_while_the_first_holds_it(tmp_path) -> None:
    path = tmp_path / handover.PID_NAME
    first = handover.PidFile(path)
    first.acquire()
    assert handover.read_pid(path) is None  # named only once it serves
    first.write()
    assert handover.read_pid(path) == os.getpid()
    code = (
        "from pathlib import Path; from npudure.service import handover; "
        f"handover.PidFile(Path({str(path)!r})).acquire()"
    )
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert other.returncode != 0
    assert f"another process (pid {os.getpid()}) serves with {path}" in other.stderr
    first.release()
    assert not path.exists()
    again = handover.PidFile(path)
    again.acquire()  # free once released
    again.release()


def test_a_successor_that_writes_ready_is_returned_by_its_pid() -> None:
    pid = asyncio.run(handover.spawn_successor(30, command=[sys.executable, "-c", READY_CHILD]))
    assert pid > 0 and pid != os.getpid()


def test_the_successor_gets_the_pipe_and_the_predecessors_pid_and_no_watchdog_pid(monkeypatch) -> None:
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    env = handover.successor_env(7, 9)
    assert env[handover.ENV_FD] == "7" and env[handover.ENV_LOCK_FD] == "9"
    assert env[handover.ENV_FROM] == str(os.getpid())
    assert "WATCHDOG_PID" not in env


def test_a_successor_that_exits_with_a_config_error_is_reported_as_one() -> None:
    command = [sys.executable, "-c", "raise SystemExit(78)"]
    with pytest.raises(handover.HandoverError, match="exited with status 78 \\(a configuration error"):
        asyncio.run(handover.spawn_successor(30, command=command))


def test_a_successor_that_says_why_it_failed_is_quoted() -> None:
    code = (
        "from npudure.service import handover; "
        "handover.report_failure('cannot listen on 127.0.0.1:1: the port is in use'); raise SystemExit(1)"
    )
    with pytest.raises(handover.HandoverError) as caught:
        asyncio.run(handover.spawn_successor(30, command=[sys.executable, "-c", code]))
    assert str(caught.value).endswith(
        "exited with status 1 before serving: cannot listen on 127.0.0.1:1: the port is in use"
    )


def test_a_silent_successor_is_stopped_after_the_timeout() -> None:
    command = [sys.executable, "-c", "import time; time.sleep(60)"]
    started = time.monotonic()
    with pytest.raises(handover.HandoverError, match="did not serve within 1s"):
        asyncio.run(handover.spawn_successor(1, command=command))
    assert time.monotonic() - started < 20  # it was terminated, not waited for


def test_a_successor_that_cannot_be_started_is_reported(tmp_path) -> None:
    with pytest.raises(handover.HandoverError, match="cannot start the new process"):
        asyncio.run(handover.spawn_successor(5, command=[str(tmp_path / "missing")]))


def _fake_service(tmp_path: Path, ok: bool) -> subprocess.Popen[bytes]:
    """A process that owns the pid file and, on SIGUSR2, records a handover the way Lifecycle does."""
    script = textwrap.dedent(
        f"""
        import os, signal, subprocess, sys, time
        from pathlib import Path
        from npudure.service import handover
        pid_file = Path({str(tmp_path / handover.PID_NAME)!r})
        status = pid_file.with_name(handover.STATUS_NAME)
        pid_file.write_text(f"{{os.getpid()}}\\n")
        def on_signal(*_):
            if {ok!r}:
                new = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"]).pid
                pid_file.write_text(f"{{new}}\\n")
                handover.Status(os.getpid(), new, True, "", time.time()).write(status)
            else:
                why = "the new process exited with status 1"
                handover.Status(os.getpid(), 0, False, why, time.time()).write(status)
        signal.signal(handover.SIGNAL, on_signal)
        print("up", flush=True)
        time.sleep(30)
        """
    )
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    assert process.stdout is not None and process.stdout.readline() == b"up\n"
    return process


def test_the_requester_returns_the_successor_once_it_owns_the_pid_file(tmp_path) -> None:
    process = _fake_service(tmp_path, ok=True)
    try:
        old, new = handover.request(tmp_path / handover.PID_NAME, 20)
        assert old == process.pid and new not in (0, old)
        os.kill(new, 15)
    finally:
        process.kill()
        process.wait()


def test_the_requester_says_why_when_the_old_process_keeps_serving(tmp_path) -> None:
    process = _fake_service(tmp_path, ok=False)
    try:
        with pytest.raises(
            handover.HandoverError, match=f"pid {process.pid} keeps serving: the new process exited"
        ):
            handover.request(tmp_path / handover.PID_NAME, 20)
    finally:
        process.kill()
        process.wait()


def test_the_requester_refuses_when_nothing_runs(tmp_path) -> None:
    with pytest.raises(handover.HandoverError, match="no running process to hand over from"):
        handover.request(tmp_path / handover.PID_NAME, 1)
