"""CPU seconds of named process groups between two marks, their run-queue waits, and CPU pinning.

Read from /proc: utime + stime of whole processes (all threads), schedstat run_delay (runnable but
waiting for a CPU) and the host's busy time, so the CPU that other processes took on a shared machine
is part of every figure.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from npudure_workshop.bench.cpu import host_cpu_busy_s, process_cpu_s


def proc_cpu_s(pid: int) -> float:
    """utime + stime of a whole process (all threads), in seconds; 0 if it is gone."""
    return process_cpu_s(pid) or 0.0


def proc_wait_s(pid: int) -> float:
    """Time the threads of a process spent runnable but waiting for a CPU (schedstat run_delay)."""
    total = 0
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError, IndexError, ValueError):
                total += int((task / "schedstat").read_text().split()[1])
    return total / 1e9


def host_busy_s() -> float:
    """Busy CPU seconds of the whole host since boot (all cores), from /proc/stat."""
    busy = host_cpu_busy_s()
    return busy[0] if busy else 0.0


def children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError):
                stat = (entry / "stat").read_text()
                if int(stat[stat.rfind(")") + 2 :].split()[1]) == pid:
                    found.append(int(entry.name))
    return found


def pin(pids: Iterable[int], cpus: set[int]) -> None:
    """Pin every thread of each process: sched_setaffinity(pid) alone moves only the main thread."""
    for pid in pids:
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{pid}/task").iterdir():
                with contextlib.suppress(OSError):
                    os.sched_setaffinity(int(task.name), cpus)


@dataclass
class Meter:
    """CPU seconds of named process groups and of the host, between two marks."""

    groups: dict[str, list[int]]
    _start: dict[str, float] = field(default_factory=dict)

    def _read(self) -> dict[str, float]:
        t = os.times()
        out = {name: sum(proc_cpu_s(p) for p in pids) for name, pids in self.groups.items()}
        out |= {f"{name}_wait": sum(proc_wait_s(p) for p in pids) for name, pids in self.groups.items()}
        out["harness"] = t.user + t.system
        out["host"] = host_busy_s()
        out["wall"] = time.perf_counter()
        return out

    def start(self) -> None:
        self._start = self._read()

    def stop(self) -> dict[str, float]:
        end = self._read()
        delta = {k: end[k] - self._start[k] for k in end}
        ours = sum(v for k, v in delta.items() if k not in ("host", "wall") and not k.endswith("_wait"))
        delta["others"] = max(0.0, delta["host"] - ours)  # other processes on a shared machine
        return delta


@dataclass
class Plan:
    proxy_cpus: set[int] | None
    rest_cpus: set[int] | None
    description: str


def plan_pinning(mode: str) -> Plan:
    cpus = sorted(os.sched_getaffinity(0))
    if mode == "split" and len(cpus) >= 2:
        proxy, rest = {cpus[0]}, set(cpus[1:])
        return Plan(
            proxy,
            rest,
            f"proxy under test (scheduler or nginx) pinned to CPU {cpus[0]}; generator, agents and this "
            f"harness pinned to CPU {','.join(map(str, sorted(rest)))}",
        )
    return Plan(None, None, "no pinning: every process may run on every CPU")
