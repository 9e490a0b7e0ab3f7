"""The scheduler's processes whose CPU a run records: given, found on a local port, or unknown (why)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from npudure_workshop.bench import cpu


def _parse_target_port(target: str) -> tuple[str, int | None]:
    host, _, port = target.rpartition(":")
    return host, int(port) if port.isdigit() else None


def _is_local_host(host: str) -> bool:
    return host in ("localhost", "127.0.0.1", "::1", "[::1]", "0.0.0.0") or host.startswith("127.")


@dataclass(frozen=True)
class SchedulerPids:
    pids: list[int]
    reason: str

    @classmethod
    def find(cls, target: str, given: list[int] | None) -> SchedulerPids:
        if given:
            return cls(list(given), "given")
        host, port = _parse_target_port(target)
        if _is_local_host(host) and port:
            pids = [p for p in cpu.pids_listening_on(port) if p != os.getpid()]
            if pids:
                return cls(pids, f"found listening on port {port}")
            return cls([], f"no process found listening on local port {port}")
        return cls(
            [],
            f"the scheduler runs on another host ({host}); its CPU is not in ClusterStatus. Run the "
            "harness on the scheduler host or pass --scheduler-pid",
        )

    def cpu_s(self) -> dict[int, float | None]:
        """Each process's CPU seconds so far (None where it cannot be read)."""
        return {pid: cpu.process_cpu_s(pid) for pid in self.pids}

    def window(self, before: dict[int, float | None], wall_s: float) -> dict[str, Any]:
        """The run's record of the scheduler's CPU since ``before``, as a fraction of a core."""
        if not self.pids:
            return {"status": "unknown", "reason": self.reason}
        fracs = {}
        for pid, start in before.items():
            end = cpu.process_cpu_s(pid)
            fracs[str(pid)] = (
                (end - start) / wall_s if (start is not None and end is not None and wall_s > 0) else None
            )
        return {"status": "measured", "fraction_of_core_by_pid": fracs, "pid_source": self.reason}
