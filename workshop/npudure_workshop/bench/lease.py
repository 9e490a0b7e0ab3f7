"""The scheduler's benchmark lease: one harness at a time, renewed in the background.

The reference once had a forgotten harness still loading the cluster at concurrency 36 while a new
one measured: baseline 197 inf/s instead of 391, then 82% errors, nearly diagnosed as broken
hardware. With the lease a second harness is refused at start with the first one's name, and a
harness that loses its lease mid-run marks the affected runs invalid.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from datetime import datetime, timezone

import grpc

from npudure.client.handover_retry import retrying
from npudure.proto import inference_pb2 as pb
from npudure_workshop.bench.cluster import BenchError, ClusterAdmin, explain

log = logging.getLogger(__name__)

DEFAULT_TTL_S = 30.0


class LeaseRefused(BenchError):
    """Another holder has the cluster."""


def default_holder(label: str = "") -> str:
    started = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    extra = f" {label}" if label else ""
    return f"npudure bench pid {os.getpid()} on {socket.gethostname()} since {started}{extra}"


class LeaseKeeper:
    """Acquire on ``acquire()``, renew every ttl/3 on a thread, release on ``release()``."""

    def __init__(self, admin: ClusterAdmin, holder: str, ttl_s: float = DEFAULT_TTL_S) -> None:
        self.admin = admin
        self.holder = holder
        self.ttl_s = ttl_s
        self.held = False
        # perf_counter() intervals (start, end or None while ongoing, reason) when renewals failed and the
        # lease may have lapsed; a later successful renewal closes the interval.
        self.doubts: list[list] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _request(self) -> pb.LeaseRequest:
        return pb.LeaseRequest(holder=self.holder, ttl_s=self.ttl_s)

    def acquire(self) -> None:
        try:
            self.admin.cluster.AcquireLease(self._request(), timeout=5.0)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.FAILED_PRECONDITION:
                raise LeaseRefused(
                    f"another benchmark holds the cluster at {self.admin.address}: {exc.details()}. Two "
                    "harnesses on one cluster measure each other; stop the other one or wait for it"
                ) from None
            raise explain(self.admin.address, "AcquireLease", exc) from None
        self.held = True
        self._stop.clear()
        self._thread = threading.Thread(target=self._renew, name="bench-lease", daemon=True)
        self._thread.start()

    def _renew(self) -> None:
        while not self._stop.wait(self.ttl_s / 3):
            try:
                # A scheduler handing over refuses the renewal (UNAVAILABLE) for a few seconds: asked
                # again until the successor takes it, within the time left before the next renewal.
                retrying(
                    lambda: self.admin.cluster.AcquireLease(self._request(), timeout=5.0),
                    budget_s=self.ttl_s / 3,
                )
            except grpc.RpcError as exc:
                if not self.doubts or self.doubts[-1][1] is not None:
                    reason = f"lease renewal failed: {exc.code().name}: {exc.details()}"
                    self.doubts.append([time.perf_counter(), None, reason])
                    log.error("%s", reason)
            else:
                if self.doubts and self.doubts[-1][1] is None:
                    self.doubts[-1][1] = time.perf_counter()

    def lost_during(self, start: float, end: float) -> str | None:
        """Why the lease was not certainly held between two perf_counter() times, or None."""
        if not self.held:
            return "the harness did not hold the scheduler lease"
        for began, ended, reason in self.doubts:
            if began <= end and (ended is None or ended >= start):
                return reason
        return None

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        if self.held:
            try:
                self.admin.cluster.ReleaseLease(self._request(), timeout=5.0)
            except grpc.RpcError as exc:
                log.warning(
                    "could not release the lease (it lapses after %.0fs): %s", self.ttl_s, exc.details()
                )
            self.held = False
