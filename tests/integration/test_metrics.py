"""The Prometheus endpoint: where it listens by default, its standard series, and TLS when TLS is on."""

from __future__ import annotations

import ssl
import urllib.request

import pytest

from npudure import config as cfg
from npudure.agent.metrics import AgentMetrics
from npudure.security import pki
from npudure.service import metrics_http
from npudure_workshop.lab.local import free_port


@pytest.mark.parametrize("model", [cfg.AgentConfig, cfg.SchedulerConfig])
def test_default_ports_are_outside_the_exporter_range(model) -> None:
    data = {"node_name": "b1"} if model is cfg.AgentConfig else {"boards": [{"name": "b", "address": "h:1"}]}
    config = cfg.parse(model, data, "t.yml")
    assert not 9100 <= config.metrics_port <= 9999
    assert metrics_http.metrics_address(config.listen, config.metrics_port, None) == (
        "0.0.0.0",
        config.metrics_port,
    )


def test_metrics_follow_the_service_address_or_metrics_listen() -> None:
    assert metrics_http.metrics_address("127.0.0.1:50051", 50091, None) == ("127.0.0.1", 50091)
    assert metrics_http.metrics_address("[::1]:50051", 50091, None) == ("::1", 50091)
    assert metrics_http.metrics_address("0.0.0.0:50051", 50091, "10.0.0.5:9999") == ("10.0.0.5", 9999)
    assert metrics_http.metrics_address("0.0.0.0:50051", 0, None) is None


def scrape(url: str, context: ssl.SSLContext | None = None) -> str:
    with urllib.request.urlopen(url, timeout=10, context=context) as reply:
        return reply.read().decode()


def test_plain_endpoint_has_build_info_process_series_and_no_created() -> None:
    port = free_port()
    metrics = AgentMetrics()
    metrics.requests.labels("OK").inc()
    server = metrics.serve("127.0.0.1:1", port, None, None)
    try:
        text = scrape(f"http://127.0.0.1:{port}/metrics")
    finally:
        server.shutdown()
        server.server_close()
    assert 'npudure_build_info{version="' in text
    assert "process_resident_memory_bytes" in text
    assert 'npudure_agent_requests_total{code="OK"} 1.0' in text
    assert "_created" not in text


def test_with_tls_the_endpoint_needs_a_fleet_certificate(tmp_path) -> None:
    pki.make_ca(tmp_path / "ca")
    server = pki.issue(tmp_path / "ca", "board", ["127.0.0.1"], tmp_path / "srv")
    client = pki.issue(tmp_path / "ca", "prometheus", [], tmp_path / "cli", usage="client")
    tls = cfg.TlsConfig(ca=str(server.ca), cert=str(server.cert), key=str(server.key))
    port = free_port()
    endpoint = AgentMetrics().serve("127.0.0.1:1", port, None, tls)
    url = f"https://127.0.0.1:{port}/metrics"
    try:
        with pytest.raises(OSError):  # plaintext HTTP against the TLS port
            scrape(f"http://127.0.0.1:{port}/metrics")
        anonymous = ssl.create_default_context(cafile=str(server.ca))
        with pytest.raises(OSError):  # TLS, but no client certificate
            scrape(url, anonymous)
        fleet = ssl.create_default_context(cafile=str(server.ca))
        fleet.load_cert_chain(str(client.cert), str(client.key))
        assert "npudure_build_info" in scrape(url, fleet)
    finally:
        endpoint.shutdown()
        endpoint.server_close()
