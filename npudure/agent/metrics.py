"""Prometheus metrics of one agent (own registry, so tests can run several servers in one process)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from npudure import metrics_http
from npudure.config import TlsConfig

STAGE_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)


class AgentMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        metrics_http.add_standard_collectors(self.registry)
        self.requests = Counter(
            "npudure_agent_requests",
            "Inference requests by gRPC status code",
            ["code"],
            registry=self.registry,
        )
        self.in_flight = Gauge("npudure_agent_in_flight", "Frames on an NPU core now", registry=self.registry)
        self.queue_depth = Gauge(
            "npudure_agent_queue_depth", "Frames waiting for a free NPU core", registry=self.registry
        )
        self.stage_seconds = Histogram(
            "npudure_agent_stage_seconds",
            "Time per request stage on the board",
            ["stage"],
            buckets=STAGE_BUCKETS,
            registry=self.registry,
        )
        self.hung_workers = Gauge(
            "npudure_agent_hung_workers", "Workers stuck past the hang timeout", registry=self.registry
        )

    def serve(self, listen: str, port: int, metrics_listen: str | None, tls: TlsConfig | None) -> object:
        return metrics_http.serve(self.registry, listen, port, metrics_listen, tls)
