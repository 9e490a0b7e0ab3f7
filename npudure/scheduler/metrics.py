"""Prometheus metrics of the scheduler (own registry)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from npudure.config import TlsConfig
from npudure.security.access import AdminGuard
from npudure.security.metrics import AdminRefusals
from npudure.service import metrics_http
from npudure.service.buckets import STAGE_BUCKETS


class SchedulerMetrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        metrics_http.add_standard_collectors(r)
        # One family for every front: method "Infer" (gRPC) or "http_detection" (the DeepStack API, its
        # outcome as the equivalent gRPC status code, so one dashboard sums both).
        self.requests_by_method = Counter(
            "npudure_scheduler_requests",
            "Client requests by gRPC status code and method",
            ["code", "method"],
            registry=r,
        )
        self.requests = _Method(self.requests_by_method, "Infer")
        self.board_requests = Counter(
            "npudure_scheduler_board_requests",
            "Board attempts by board and status code",
            ["board", "code"],
            registry=r,
        )
        self.retries = Counter("npudure_scheduler_retries", "Requests retried on another board", registry=r)
        self.http_connections_refused = Counter(
            "npudure_scheduler_http_connections_refused",
            "HTTP API connections answered 503 and closed: http_api.max_connections were open",
            registry=r,
        )
        self.in_flight = Gauge(
            "npudure_scheduler_board_in_flight", "Requests in flight per board", ["board"], registry=r
        )
        self.queue_depth = Gauge(
            "npudure_scheduler_queue_depth", "Requests waiting for a free board", registry=r
        )
        self.board_up = Gauge(
            "npudure_scheduler_board_state", "1 for the board's current state", ["board", "state"], registry=r
        )
        # Taken out on purpose (drained, or left out of the active set): the board-down alert's exception.
        self.board_drained = Gauge(
            "npudure_scheduler_board_drained",
            "1 while an operator keeps the board out (drained or not in the active set)",
            ["board"],
            registry=r,
        )
        self.latency = Histogram(
            "npudure_scheduler_stage_seconds",
            "Per-request stage time by board",
            ["board", "stage"],
            buckets=STAGE_BUCKETS,
            registry=r,
        )

    def watch_admin(self, guard: AdminGuard) -> None:
        self.registry.register(AdminRefusals(lambda: guard.refused))

    def serve(
        self,
        listen: str,
        port: int,
        metrics_listen: str | None,
        tls: TlsConfig | None,
        reuse_port: bool = False,
    ) -> metrics_http.BoundedMetricsServer | None:
        return metrics_http.serve(self.registry, listen, port, metrics_listen, tls, reuse_port)


class _Method:
    """``requests`` as the gRPC front knew it: ``.labels(code)``, with its method filled in."""

    def __init__(self, counter: Counter, method: str) -> None:
        self._counter = counter
        self._method = method

    def labels(self, code: str) -> Counter:
        return self._counter.labels(code, self._method)
