"""One board's launcher: joins the board's cgroups, runs systemd-nspawn, and starts it again when the
board reboots (nspawn exits with 133 on a reboot inside the container).

Started detached (``setsid -f``) by ``npudure lab up`` as ``python -m npudure_workshop.lab.launcher SPEC``;
SIGTERM powers the board off cleanly (nspawn forwards it as a shutdown request) and ends the loop.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REBOOT_EXIT = 133
# A board that reboots this many times in a row within QUICK_S of starting is broken: stop looping.
MAX_QUICK_REBOOTS = 5
QUICK_S = 5.0


def _log(msg: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} launcher[{os.getpid()}]: {msg}", flush=True)


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[1]).read_text())
    Path(spec["launcher_pid_file"]).write_text(f"{os.getpid()}\n")
    # Join the board's cgroups before nspawn starts, so nspawn builds its payload/supervisor groups
    # under this board instead of at the host's root, and the board's CPU quota applies to it.
    for cgroup in spec["cgroups"]:
        Path(cgroup, "cgroup.procs").write_text(f"{os.getpid()}\n")
    stopping = False
    child: subprocess.Popen | None = None

    def on_signal(signum: int, _frame) -> None:
        nonlocal stopping
        stopping = True
        _log(f"signal {signum}: powering the board off")
        if child is not None and child.poll() is None:
            child.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    quick = 0
    while True:
        started = time.monotonic()
        with open(spec["console_log"], "ab") as console:
            child = subprocess.Popen(
                spec["nspawn_cmd"], stdin=subprocess.DEVNULL, stdout=console, stderr=subprocess.STDOUT
            )
        Path(spec["nspawn_pid_file"]).write_text(f"{child.pid}\n")
        _log(f"started systemd-nspawn pid {child.pid}")
        if stopping:  # the signal came before the child existed
            child.send_signal(signal.SIGTERM)
        rc = child.wait()
        _log(f"systemd-nspawn exited with {rc}")
        if rc != REBOOT_EXIT or stopping:
            return rc
        quick = quick + 1 if time.monotonic() - started < QUICK_S else 0
        if quick >= MAX_QUICK_REBOOTS:
            _log(f"rebooted {quick} times within {QUICK_S:.0f} s of starting: giving up")
            return rc
        _log("board rebooted: starting it again")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
