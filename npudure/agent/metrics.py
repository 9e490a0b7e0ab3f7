"""Prometheus metrics of one agent (own registry, so tests can run several servers in one process)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from npudure.agent.cpu_account import CpuAccount, CpuCollector
from npudure.backends.base import Backend
from npudure.backends.sim import CAP_LADDER
from npudure.board.exporter import BoardCollector
from npudure.config import TlsConfig
from npudure.security.access import AdminGuard
from npudure.security.metrics import AdminRefusals
from npudure.service import metrics_http
from npudure.service.buckets import STAGE_BUCKETS


class _EmulationCollector(Collector):
    """The sim backend's cumulative modelled and achieved service seconds, read at scrape time."""

    def __init__(self, totals: Callable[[], tuple[float, float] | None]) -> None:
        self._totals = totals

    def collect(self) -> Iterator[CounterMetricFamily]:
        totals = self._totals()
        if totals is None:  # a real backend: nothing emulated to report
            return
        model_s, actual_s = totals
        yield CounterMetricFamily(
            "npudure_agent_emulation_model_seconds", "Modelled NPU service seconds (emulated)", value=model_s
        )
        yield CounterMetricFamily(
            "npudure_agent_emulation_actual_seconds", "Achieved NPU service s (emulated)", value=actual_s
        )


# (model name, default, contexts, in flight, queued, frames served) for each of the board's models.
ModelLoad = tuple[str, bool, int, int, int, int]


class ModelCollector(Collector):
    """Each model's pool, read at scrape time (nothing on the frame path): contexts, in flight, queued,
    and OK frames served, labelled by model (``default="true"`` on the default one)."""

    def __init__(self, models: Callable[[], list[ModelLoad]]) -> None:
        self._models = models

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        labels = ["model", "default"]
        contexts = GaugeMetricFamily(
            "npudure_agent_model_contexts", "Inference contexts per model", labels=labels
        )
        in_flight = GaugeMetricFamily(
            "npudure_agent_model_in_flight", "Frames on a model's contexts now", labels=labels
        )
        queued = GaugeMetricFamily(
            "npudure_agent_model_queue_depth", "Frames waiting for a model's free context", labels=labels
        )
        served = CounterMetricFamily(
            "npudure_agent_model_frames", "OK frames answered per model", labels=labels
        )
        for name, default, n_contexts, busy, waiting, frames in self._models():
            values = [name, "true" if default else "false"]
            contexts.add_metric(values, n_contexts)
            in_flight.add_metric(values, busy)
            queued.add_metric(values, waiting)
            served.add_metric(values, frames)
        yield from (contexts, in_flight, queued, served)


def emulated_cpu_mhz(backend: Backend) -> Callable[[], float | None]:
    """The CPU clock an emulated board models: its cap, else the top of the sim's cap ladder."""
    return lambda: float(backend.cpu_cap_mhz or CAP_LADDER[-1][0])


class AgentMetrics:
    def __init__(
        self,
        emulation_totals: Callable[[], tuple[float, float] | None] | None = None,
        sysfs_root: str | None = None,
        backend: Backend | None = None,
        cpu: CpuAccount | None = None,
    ) -> None:
        self.registry = CollectorRegistry()
        if cpu is not None:  # npudure_agent_stage_cpu_seconds_total, ..._loop_thread_cpu_seconds_total
            self.registry.register(CpuCollector(cpu))
        if sysfs_root is not None:  # npudure_board_*: temperatures, trip points, clocks (docs/metrics.md)
            modelled = emulated_cpu_mhz(backend) if backend is not None and backend.emulated else None
            self.registry.register(BoardCollector(sysfs_root, modelled))
        if emulation_totals is not None:
            # Lag over a scrape window: rate(actual) / rate(model) - 1.
            self.registry.register(_EmulationCollector(emulation_totals))
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
        self._stages: dict[str, Histogram] = {}
        self.hung_workers = Gauge(
            "npudure_agent_hung_workers", "Workers stuck past the hang timeout", registry=self.registry
        )
        self.context_recoveries = Counter(
            "npudure_agent_context_recoveries",
            "Hung NPU contexts replaced by new ones",
            registry=self.registry,
        )

    def stage(self, name: str) -> Histogram:
        """The stage's histogram child, looked up once (``labels()`` costs ~2 µs a call, 7 per frame)."""
        child = self._stages.get(name)
        if child is None:
            child = self._stages[name] = self.stage_seconds.labels(name)
        return child

    def watch_models(self, models: Callable[[], list[ModelLoad]]) -> None:
        self.registry.register(ModelCollector(models))

    def watch_admin(self, guard: AdminGuard) -> None:
        self.registry.register(AdminRefusals(lambda: guard.refused))

    def serve(self, listen: str, port: int, metrics_listen: str | None, tls: TlsConfig | None) -> object:
        return metrics_http.serve(self.registry, listen, port, metrics_listen, tls)
