"""The agent's CPU-cap dial, chosen once at start: cpufreq on a real board, the sim's model when emulated.

The rest of the agent calls :meth:`CpuCap.set` and reads :attr:`CpuCap.mhz` / :attr:`CpuCap.note`
without asking which kind it holds; both raise only :class:`CpuCapError`.
"""

from __future__ import annotations

import logging
import os
from abc import ABC, abstractmethod

from npudure.backends.base import Backend, BackendError

log = logging.getLogger(__name__)


class CpuCapError(Exception):
    """The cap could not be set; the message says why and what to do."""


class CpuCap(ABC):
    kind: str

    def __init__(self) -> None:
        self.mhz: int | None = None
        # Which clusters could not take the requested clock (empty when all did).
        self.note = ""

    @abstractmethod
    def _apply(self, mhz: int | None) -> str: ...

    def set(self, mhz: int | None) -> str:
        """Cap at ``mhz`` (None or 0 lifts it); returns the note (clamped clusters), "" if none."""
        mhz = mhz or None
        self.note = self._apply(mhz)
        self.mhz = mhz
        return self.note


class EmulatedCpuCap(CpuCap):
    """The sim backend's modelled cap: no clock changes, the service time stretches instead."""

    kind = "emulated"

    def __init__(self, backend: Backend) -> None:
        super().__init__()
        self._backend = backend
        self.mhz = backend.cpu_cap_mhz

    def _apply(self, mhz: int | None) -> str:
        try:
            self._backend.set_cpu_cap(mhz)
        except BackendError as exc:
            raise CpuCapError(str(exc)) from None
        return ""


class SysfsCpuCap(CpuCap):
    """cpufreq's scaling_max_freq on every cluster that can take the clock (see cpufreq.cap_clusters)."""

    kind = "cpufreq"

    def __init__(self, sysfs_root: str | os.PathLike[str]) -> None:
        super().__init__()
        self._root = sysfs_root

    def _apply(self, mhz: int | None) -> str:
        from npudure.board import cpufreq

        try:
            if mhz is None:
                cpufreq.remove_cap(None, self._root)
                return ""
            return cpufreq.cap_clusters(mhz, None, self._root).describe()
        except (cpufreq.CpuFreqError, OSError, ValueError) as exc:
            raise CpuCapError(str(exc)) from None


def choose(backend: Backend, sysfs_root: str | os.PathLike[str]) -> CpuCap:
    """Emulated boards model the cap (their sysfs is not theirs to change); real ones use cpufreq."""
    cap: CpuCap = EmulatedCpuCap(backend) if backend.emulated else SysfsCpuCap(sysfs_root)
    log.debug("CPU cap through %s", cap.kind)
    return cap
