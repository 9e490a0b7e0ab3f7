"""The bounded metrics server in-process: a scrape over mutual TLS, a silent client cut after its
timeout, and clients beyond the cap closed at accept."""

from __future__ import annotations

import socket
import ssl
import threading
import time
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter

from npudure.config import TlsConfig
from npudure.security import pki
from npudure.service import metrics_http
from npudure_workshop.lab.local import free_port


def _registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    Counter("npudure_test", "a test series", registry=registry).inc()
    return registry


def test_scrape_over_mutual_tls_and_a_client_without_a_certificate_is_refused(tmp_path: Path) -> None:
    ca = tmp_path / "ca"
    pki.make_ca(ca)
    server_cert = pki.issue(ca, "board", ["127.0.0.1"], tmp_path / "server")
    client_cert = pki.issue(ca, "npudure-admin", [], tmp_path / "client", usage="client")
    tls = TlsConfig(ca=str(server_cert.ca), cert=str(server_cert.cert), key=str(server_cert.key))
    port = free_port()
    server = metrics_http.serve(_registry(), f"127.0.0.1:{port}", port, None, tls)
    try:
        context = ssl.create_default_context(cafile=str(client_cert.ca))
        context.load_cert_chain(str(client_cert.cert), str(client_cert.key))
        with (
            socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
            context.wrap_socket(raw, server_hostname="127.0.0.1") as sock,
        ):
            sock.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            reply = b"".join(iter(lambda: sock.recv(65536), b""))
        assert b"npudure_test_total 1.0" in reply
        anonymous = ssl.create_default_context(cafile=str(client_cert.ca))
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
            try:
                with anonymous.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
                    sock.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
                    refused = sock.recv(65536) == b""
            except (ssl.SSLError, OSError):
                refused = True
        assert refused
    finally:
        server.shutdown()


def test_silent_clients_are_cut_and_the_excess_closed_at_accept(monkeypatch) -> None:
    monkeypatch.setattr(metrics_http.BoundedMetricsServer, "REQUEST_TIMEOUT_S", 0.5)
    port = free_port()
    server = metrics_http.serve(_registry(), f"127.0.0.1:{port}", port, None, None)
    try:
        before = threading.active_count()
        silent = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(30)]
        time.sleep(0.3)
        assert threading.active_count() <= before + 2 * server.MAX_CLIENTS  # a worker and a timer each
        started = time.monotonic()
        for sock in silent:
            assert sock.recv(1) == b""  # closed: at accept (over the cap) or after the read timeout
            sock.close()
        assert time.monotonic() - started < 10
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            assert b"npudure_test_total" in b"".join(iter(lambda: sock.recv(65536), b""))
    finally:
        server.shutdown()


def test_clients_stalled_in_their_request_head_cannot_starve_scrapes() -> None:
    """As the probe did: every slot held by a socket that sent a request line and stopped; one more is
    opened before each scrape, so there are always more stalled heads than slots."""
    port = free_port()
    server = metrics_http.serve(_registry(), f"127.0.0.1:{port}", port, None, None)
    stalled: list[socket.socket] = []

    def stall() -> None:
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        sock.sendall(b"GET /metrics HTTP/1.1\r\n")
        stalled.append(sock)

    try:
        for _ in range(server.MAX_CLIENTS):
            stall()
        scraped = 0
        for _ in range(30):
            stall()
            with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
                sock.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
                scraped += b"npudure_test_total" in b"".join(iter(lambda: sock.recv(65536), b""))
        assert scraped == 30
        assert server.evicted >= 30  # the stalled ones made room: the oldest first
        assert sum(sock.recv(1) == b"" for sock in stalled[:30]) == 30  # evicted: closed, unanswered
    finally:
        for sock in stalled:
            sock.close()
        server.shutdown()
