"""Binary handover: a running service starts its successor, which takes over the same port, and steps
down only once the successor serves (nginx's upgrade, without the fd passing).

- The predecessor holds an exclusive ``flock`` on its pid file; a second copy started by mistake finds
  it taken and refuses, which is what lets the ports be bound with SO_REUSEPORT at all (otherwise a
  stray second server silently takes half the connections).
- On SIGUSR2 (``npudure scheduler --handover`` sends it) the predecessor spawns the same command from
  the installed path (``sys.executable -m npudure ...``: an upgraded virtualenv's new code runs) with
  the locked pid file and one end of a pipe inherited. The successor binds the same ports, loads the
  persisted state, serves, tells systemd ``MAINPID=<its pid>`` + ``READY=1`` (NotifyAccess=all), takes
  the pid file over and writes ``ready`` on the pipe.
- The predecessor then stops without a drain pause (its listener closes, gRPC sends GOAWAY, clients
  reconnect to the successor, the calls in flight finish) and exits. If the successor exits or stays
  silent, the predecessor kills it, keeps serving, and records why in the status file, which the
  command that asked reads to exit non-zero with that line.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

# The successor's end of the pipe (fd number) and the pid it takes over from.
ENV_FD = "NPUDURE_HANDOVER_FD"
ENV_FROM = "NPUDURE_HANDOVER_FROM"
ENV_LOCK_FD = "NPUDURE_HANDOVER_LOCK_FD"
READY = b"ready\n"
FAILED = b"failed: "
PID_NAME = "scheduler.pid"
STATUS_NAME = "handover.json"
SIGNAL = signal.SIGUSR2


class HandoverError(Exception):
    """Why a handover did not happen, in the operator's terms."""


class NothingToHandOver(HandoverError):
    """No process serves under the pid file: start the service instead."""


class AlreadyRunning(Exception):
    pass


# ---------------------------------------------------------------------------------------- pid file
class PidFile:
    """The pid file, locked (flock) for as long as a process of this service serves."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd: int | None = None

    def acquire(self) -> None:
        """Take the lock (or, as a successor, adopt the predecessor's); AlreadyRunning if another holds it."""
        inherited = os.environ.pop(ENV_LOCK_FD, "")
        if inherited:  # the same open file description: the lock is ours already
            self.fd = int(inherited)
            os.set_inheritable(self.fd, False)
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise AlreadyRunning(
                f"another process (pid {read_pid(self.path) or '?'}) serves with {self.path}: stop it "
                "first, or use --handover to replace it"
            ) from None
        self.fd = fd
        # Empty until this process serves (``write``): a handover asked for before then finds no one.
        os.ftruncate(fd, 0)

    def write(self) -> None:
        """This process is the one serving (called once it serves, a successor's included)."""
        assert self.fd is not None
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"{os.getpid()}\n".encode(), 0)

    def release(self) -> None:
        """At a normal stop: the file goes (a handed-over predecessor keeps it: its successor's now)."""
        if self.fd is not None:
            if read_pid(self.path) == os.getpid():
                self.path.unlink(missing_ok=True)
            os.close(self.fd)
            self.fd = None


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip() or 0) or None
    except (OSError, ValueError):
        return None


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def running(pid: int) -> bool:
    """True while ``pid`` runs: unlike ``alive``, a zombie waiting for its reaper counts as exited
    (a successor outlives its parent, the old process; whoever waits for it to go sees the zombie)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


# ---------------------------------------------------------------------------------------- status
@dataclass(frozen=True)
class Status:
    """The last handover's outcome, as the predecessor saw it."""

    predecessor: int
    successor: int
    ok: bool
    reason: str
    at_unix: float

    @classmethod
    def read(cls, path: Path) -> Status | None:
        try:
            return cls(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def write(self, path: Path) -> None:
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(self.__dict__) + "\n")
        os.replace(tmp, path)


# ---------------------------------------------------------------------------------------- predecessor
def successor_command() -> list[str]:
    """This process's own command, from the installed interpreter (``-m``: whatever is installed now)."""
    return [sys.executable, "-m", "npudure", *sys.argv[1:]]


def successor_env(pipe_fd: int, lock_fd: int | None) -> dict[str, str]:
    env = dict(os.environ)
    env[ENV_FD] = str(pipe_fd)
    env[ENV_FROM] = str(os.getpid())
    if lock_fd is not None:
        env[ENV_LOCK_FD] = str(lock_fd)
    # systemd's watchdog follows MAINPID=; the successor pings once it serves (sdnotify reads these).
    env.pop("WATCHDOG_PID", None)
    return env


async def spawn_successor(
    timeout_s: float, lock_fd: int | None = None, command: list[str] | None = None
) -> int:
    """Start the successor and wait until it serves; its pid, or HandoverError (it is then stopped)."""
    read_fd, write_fd = os.pipe()
    fds = (write_fd,) if lock_fd is None else (write_fd, lock_fd)
    try:
        if lock_fd is not None:
            os.set_inheritable(lock_fd, True)
        process = subprocess.Popen(
            command or successor_command(), env=successor_env(write_fd, lock_fd), pass_fds=fds
        )
    except OSError as exc:
        os.close(read_fd)
        raise HandoverError(f"cannot start the new process: {exc}") from None
    finally:
        os.close(write_fd)
        if lock_fd is not None:
            os.set_inheritable(lock_fd, False)
    log.info("handover: started pid %d, waiting up to %.0fs for it to serve", process.pid, timeout_s)
    try:
        said = await asyncio.wait_for(asyncio.to_thread(_read_all, read_fd), timeout_s)
    except asyncio.TimeoutError:
        said = b""
        reason = f"the new process (pid {process.pid}) did not serve within {timeout_s:.0f}s"
    else:
        reason = ""
    finally:
        os.close(read_fd)
    if said == READY:
        return process.pid
    if not reason:  # the pipe closed: it exited (or closed it) before serving
        code = await asyncio.to_thread(_wait, process, 5.0)
        reason = f"the new process (pid {process.pid}) {_exit_words(code)} before serving"
        if said.startswith(FAILED):
            reason += ": " + said[len(FAILED) :].decode(errors="replace").strip()
    await asyncio.to_thread(_stop, process)
    raise HandoverError(reason)


def report_failure(message: str) -> None:
    """A successor that cannot serve: its reason, in its own words, on the pipe (a no-op otherwise)."""
    value = os.environ.get(ENV_FD, "")
    if value.isdigit():
        with contextlib.suppress(OSError):
            os.write(int(value), FAILED + message.encode()[:2000] + b"\n")


def _read_all(fd: int) -> bytes:
    data = b""
    while chunk := os.read(fd, 64):
        data += chunk
    return data


def _wait(process: subprocess.Popen[bytes], timeout_s: float) -> int | None:
    with contextlib.suppress(subprocess.TimeoutExpired):
        return process.wait(timeout_s)
    return None


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        if _wait(process, 10.0) is None:
            process.kill()
            process.wait()


def _exit_words(code: int | None) -> str:
    if code is None:
        return "closed its handover pipe"
    if code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    if code == 78:
        return "exited with status 78 (a configuration error)"
    return f"exited with status {code}"


# ---------------------------------------------------------------------------------------- successor
def predecessor() -> int | None:
    """The pid this process takes over from, when it was started by a handover."""
    value = os.environ.get(ENV_FROM, "")
    return int(value) if value.isdigit() else None


def tell_predecessor() -> None:
    """Write ``ready`` on the inherited pipe and close it (once; a no-op outside a handover)."""
    value = os.environ.pop(ENV_FD, "")
    os.environ.pop(ENV_FROM, None)
    if not value.isdigit():
        return
    fd = int(value)
    try:
        os.write(fd, READY)
    except OSError as exc:  # the predecessor gave up on us: we serve beside it until it is stopped
        log.warning("handover: could not tell the previous process we serve: %s", exc)
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)


# ---------------------------------------------------------------------------------------- requester
def request(pid_path: Path, timeout_s: float, poll_s: float = 0.1) -> tuple[int, int]:
    """Ask the process named by ``pid_path`` to hand over and wait until its successor serves.

    (old pid, new pid), or HandoverError with the reason (nothing running, refused, failed)."""
    status_path = pid_path.with_name(STATUS_NAME)
    old = read_pid(pid_path)
    if old is None or not alive(old):
        raise NothingToHandOver(f"no running process to hand over from ({pid_path} names none)")
    before = Status.read(status_path)
    try:
        os.kill(old, SIGNAL)
    except OSError as exc:
        raise HandoverError(f"cannot signal pid {old}: {exc.strerror}") from None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = Status.read(status_path)
        if status is not None and status != before and status.predecessor == old:
            if not status.ok:
                raise HandoverError(f"pid {old} keeps serving: {status.reason}")
            if read_pid(pid_path) == status.successor and alive(status.successor):
                return old, status.successor
        if not alive(old) and read_pid(pid_path) in (None, old):
            raise HandoverError(f"pid {old} exited without handing over (see its log)")
        time.sleep(poll_s)
    raise HandoverError(f"pid {old} did not report a handover within {timeout_s:.0f}s")
