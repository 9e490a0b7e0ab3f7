"""What a benchmark session is told: warm-up, duration, sample floor, timeouts, telemetry, load path."""

from __future__ import annotations

from dataclasses import dataclass

from npudure_workshop.bench.lease import DEFAULT_TTL_S
from npudure_workshop.bench.validity import HOST_MAX_STEAL_FRACTION


@dataclass
class BenchSettings:
    warmup_s: float = 2.0
    duration_s: float = 10.0
    # A run lasts at least duration_s AND until this many successful measured requests exist
    # (bounded by max_duration_s), so slow clusters still give ≥ 100 samples per run.
    min_samples: int = 100
    max_duration_s: float | None = None
    timeout_s: float = 30.0
    harness_connections: int = 2
    telemetry_interval_s: float = 1.0
    # Ask each board's agent directly for telemetry (fresh); else only the scheduler's cached copy.
    direct_telemetry: bool = True
    settle_s: float = 0.3  # pause between runs (each run is drained already; lets the boards idle)
    board_up_wait_s: float = 15.0
    lease_ttl_s: float = DEFAULT_TTL_S
    open_loop_max_outstanding: int = 256
    # "grpc"; "http": the DeepStack-compatible HTTP API at http_url (bench/http_load.py); "zmq": Frigate's
    # zmq endpoint at zmq_endpoint (bench/zmq_load.py).
    api: str = "grpc"
    http_url: str | None = None
    zmq_endpoint: str | None = None
    # A run is invalid (host_saturated) when the hypervisor stole more of the host's CPU than this;
    # recorded with the run. Raised only where the figures are not the point (a test of the plumbing).
    max_steal_fraction: float = HOST_MAX_STEAL_FRACTION

    @property
    def expected_run_s(self) -> float:
        return self.warmup_s + self.duration_s
