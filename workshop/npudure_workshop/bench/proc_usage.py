"""One process's CPU (utime + stime from /proc/PID/stat) and resident memory, sampled in a thread so
any window of a run can be read afterwards: the agent's cost at each context count.

CPU is given as % of one core (100% = one core busy the whole window), RSS in MiB (the most seen in
the window: each context holds its own copy of the model's buffers).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
UTIME, STIME, RSS = 11, 12, 21  # fields 14, 15 and 24 of /proc/PID/stat, counted after "(comm)"


@dataclass(frozen=True)
class ProcSample:
    t_unix: float
    cpu_s: float
    rss_bytes: int


def read(pid: int, proc_root: Path = Path("/proc")) -> tuple[float, int] | None:
    """(user + system CPU seconds, RSS bytes) of ``pid``; None once it is gone."""
    try:
        text = (proc_root / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()  # the command name may hold spaces and parentheses
    cpu_s = (int(fields[UTIME]) + int(fields[STIME])) / CLOCK_TICKS
    return cpu_s, int(fields[RSS]) * PAGE_BYTES


@dataclass(frozen=True)
class Usage:
    cpu_pct_of_core: float | None
    rss_max_mib: float | None


class ProcSampler:
    """Samples ``pid`` every ``interval_s`` from ``start()`` to ``stop()``."""

    def __init__(self, pid: int, interval_s: float = 0.1, proc_root: Path = Path("/proc")) -> None:
        self.pid = pid
        self.interval_s = interval_s
        self.proc_root = proc_root
        self.samples: list[ProcSample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"proc-usage-{pid}", daemon=True)

    def start(self) -> ProcSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        while True:
            self.sample()
            if self._stop.wait(self.interval_s):
                return

    def sample(self) -> None:
        reading = read(self.pid, self.proc_root)
        if reading is not None:
            self.samples.append(ProcSample(time.time(), *reading))

    def window(self, start_unix: float, end_unix: float) -> Usage:
        return usage(self.samples, start_unix, end_unix)


def usage(samples: list[ProcSample], start_unix: float, end_unix: float) -> Usage:
    """CPU between the samples that bracket the window most tightly from inside (so the run's warm-up
    and drain stay out), and the largest RSS sampled within it; None where fewer than two samples fall
    in it."""
    inside = [s for s in samples if start_unix <= s.t_unix <= end_unix]
    if len(inside) < 2:
        return Usage(None, None)
    first, last = inside[0], inside[-1]
    span = last.t_unix - first.t_unix
    cpu = 100.0 * (last.cpu_s - first.cpu_s) / span if span > 0 else None
    return Usage(cpu, max(s.rss_bytes for s in inside) / 2**20)
