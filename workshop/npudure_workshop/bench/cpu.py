"""CPU meters for the validity checks: is the load generator (or the scheduler) itself the bottleneck?

A benchmark whose generator saturates a core measures the generator. The harness process is metered
with ``os.times()`` (all threads) and the event-loop thread with ``time.thread_time()`` (the one
thread that issues every request). Another process on this host (the scheduler of a local cluster)
is metered from ``/proc/<pid>/stat`` utime + stime.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from npudure_workshop.bench.validity import HOST_MAX_STEAL_FRACTION


@dataclass(frozen=True)
class CpuSample:
    wall_s: float  # time.perf_counter()
    process_s: float  # user + system CPU of the whole process
    thread_s: float  # CPU of the calling (event-loop) thread


def harness_cpu_sample() -> CpuSample:
    t = os.times()
    return CpuSample(time.perf_counter(), t.user + t.system, time.thread_time())


# Injectable for tests: a saturated generator is simulated by a probe that reports one.
CpuProbe = Callable[[], CpuSample]


def _clock_ticks() -> int:
    try:
        return os.sysconf("SC_CLK_TCK")
    except (ValueError, OSError):
        return 100


def process_cpu_s(pid: int) -> float | None:
    """utime + stime of ``pid`` in seconds, from /proc/<pid>/stat; None if unreadable (gone, not Linux)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses: split after its closing ')'.
    fields = stat[stat.rfind(")") + 2 :].split()
    try:
        utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5)
    except (IndexError, ValueError):
        return None
    return (utime + stime) / _clock_ticks()


class HostCpu(NamedTuple):
    """Whole-host CPU seconds since boot (all cores), from /proc/stat."""

    busy_s: float  # everything but idle and iowait (steal included: the VM did not get that time)
    total_s: float
    steal_s: float  # time the hypervisor gave to someone else


def host_cpu_busy_s() -> HostCpu | None:
    """Whole-host CPU seconds since boot, from /proc/stat; None if unavailable. Inside a container
    /proc/stat is the host's, so an emulated fleet's boards are counted too."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            first = f.readline().split()
    except OSError:
        return None
    if not first or first[0] != "cpu":
        return None
    values = [int(v) for v in first[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    steal = values[7] if len(values) > 7 else 0
    # guest and guest_nice (fields 9-10) are already inside user and nice.
    total = sum(values[:8])
    ticks = _clock_ticks()
    return HostCpu((total - idle) / ticks, total / ticks, steal / ticks)


def host_window(
    before: HostCpu | None, after: HostCpu | None, shared: bool, max_steal: float = HOST_MAX_STEAL_FRACTION
) -> dict[str, object] | None:
    """Idle and steal fractions of the host's CPU between two samples, for the host_saturated rule.
    ``shared``: the harness and the scheduler (and, in the lab, the emulated boards) run on this host;
    ``max_steal``: the steal fraction the run was allowed (``--max-steal``)."""
    window = _between(before, after)
    if window is None:
        return None
    return {
        "idle_fraction": 1 - window.busy_s / window.total_s,
        "steal_fraction": window.steal_s / window.total_s,
        "cpu_count": os.cpu_count() or 1,
        "shared_with_cluster": shared,
        "steal_limit": max_steal,
    }


def host_others(before: HostCpu | None, after: HostCpu | None, own_s: float) -> dict[str, float] | None:
    """What else the host ran between two samples, for a benchmark that knows its own CPU: ``own_s``
    is the CPU seconds of every process it started (itself included). ``others_fraction`` is the
    rest of the host's busy time (steal taken out), ``steal_fraction`` what the hypervisor gave to
    other guests, both as fractions of all the host's cores over the window. A load average says
    only that something was runnable; this says how much CPU it took. None if unavailable."""
    window = _between(before, after)
    if window is None:
        return None
    others = max(window.busy_s - window.steal_s - own_s, 0.0)
    return {"others_fraction": others / window.total_s, "steal_fraction": window.steal_s / window.total_s}


def _between(before: HostCpu | None, after: HostCpu | None) -> HostCpu | None:
    """The host's CPU seconds spent between two samples; None if either is missing or no time passed."""
    if before is None or after is None or after.total_s <= before.total_s:
        return None
    return HostCpu(
        after.busy_s - before.busy_s, after.total_s - before.total_s, after.steal_s - before.steal_s
    )


def _listening_inodes(port: int) -> set[str]:
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as f:
                next(f, None)
                for line in f:
                    parts = line.split()
                    # local_address is HEXIP:HEXPORT; state 0A is LISTEN; inode is field 10.
                    if len(parts) > 9 and parts[3] == "0A" and int(parts[1].rsplit(":", 1)[1], 16) == port:
                        inodes.add(parts[9])
        except (OSError, ValueError):
            continue
    return inodes


def pids_listening_on(port: int) -> list[int]:
    """Pids of the processes on this host listening on TCP ``port`` (needs permission to read their fds;
    empty when none is found or the port belongs to another host)."""
    inodes = _listening_inodes(port)
    if not inodes:
        return []
    wanted = {f"socket:[{i}]" for i in inodes}
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{entry}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{entry}/fd/{fd}") in wanted:
                    pids.append(int(entry))
                    break
            except OSError:
                continue
    return sorted(pids)
