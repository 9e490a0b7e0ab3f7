"""The Prometheus endpoint of the agent and the scheduler: where it listens, TLS, and the standard series.

Default address: the service's own listen host on ``metrics_port`` (agent 50091, scheduler 50090: outside
9100-9999, where node_exporter, haproxy_exporter and most other exporters live). With ``tls:`` the
endpoint speaks mutual TLS with the service's own certificate and CA, like the gRPC port.
Series: see docs/metrics.md.
"""

from __future__ import annotations

from wsgiref.simple_server import WSGIServer

import prometheus_client
from prometheus_client import CollectorRegistry, Info, ProcessCollector

from npudure import __version__
from npudure.config import TlsConfig
from npudure.security.metrics import CertificateExpiry

# One sample per counter/histogram, not two: the *_created series double the scrape for nothing here.
prometheus_client.disable_created_metrics()


def add_standard_collectors(registry: CollectorRegistry) -> None:
    """process_* (CPU, RSS, open fds of this process) and npudure_build_info{version}."""
    ProcessCollector(registry=registry)
    Info("npudure_build", "NPUDure version of this process", registry=registry).info({"version": __version__})


def metrics_address(listen: str, port: int, metrics_listen: str | None) -> tuple[str, int] | None:
    """(host, port) to serve on; None when metrics are off (port 0 and no metrics_listen)."""
    if metrics_listen:
        host, _, text = metrics_listen.rpartition(":")
        return host.strip("[]"), int(text)
    if not port:
        return None
    return listen.rpartition(":")[0].strip("[]"), port


def serve(
    registry: CollectorRegistry, listen: str, port: int, metrics_listen: str | None, tls: TlsConfig | None
) -> WSGIServer | None:
    """Start the endpoint in a daemon thread; returns its server (for shutdown) or None when off."""
    address = metrics_address(listen, port, metrics_listen)
    if address is None:
        return None
    host, bind_port = address
    if tls is not None:  # npudure_tls_certificate_expiry_timestamp_seconds
        registry.register(CertificateExpiry(tls))
    if tls is None:
        server, _ = prometheus_client.start_http_server(bind_port, addr=host, registry=registry)
    else:
        server, _ = prometheus_client.start_http_server(
            bind_port,
            addr=host,
            registry=registry,
            certfile=tls.cert,
            keyfile=tls.key,
            client_cafile=tls.ca,
            client_auth_required=True,
        )
    return server
