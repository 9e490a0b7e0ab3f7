"""The Prometheus endpoint of the agent and the scheduler: where it listens, TLS, and the standard series.

Default address: the service's own listen host on ``metrics_port`` (agent 50091, scheduler 50090: outside
9100-9999, where node_exporter, haproxy_exporter and most other exporters live). With ``tls:`` the
endpoint speaks mutual TLS with the service's own certificate and CA, like the gRPC port.
Series: see docs/metrics.md.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import ssl
import threading
import time
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

import prometheus_client
from prometheus_client import CollectorRegistry, Info, ProcessCollector

from npudure import __version__
from npudure.config import TlsConfig
from npudure.security.metrics import CertificateExpiry

log = logging.getLogger(__name__)

# What socketserver hands a handler: the connection (TCP) or (data, socket) for datagram servers.
_Request = socket.socket | tuple[bytes, socket.socket]

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


class _QuietHandler(WSGIRequestHandler):
    server: BoundedMetricsServer

    def parse_request(self) -> bool:
        # The head is in: from here the connection is served, no longer one a newcomer may evict. One
        # evicted while its head arrived gets no answer.
        return super().parse_request() and self.server.head_read(self.client_address)

    def log_message(self, format: str, *args: object) -> None:
        pass  # one line per scrape is noise; errors are counted, not printed


class BoundedMetricsServer(ThreadingMixIn, WSGIServer):
    """The exporter's HTTP server with bounds: at most ``MAX_CLIENTS`` connections served at once, each
    given ``REQUEST_TIMEOUT_S`` per read and ``REQUEST_DEADLINE_S`` in all (a slow or silent client
    cannot hold a thread, an fd or the TLS handshake), and errors counted instead of printed as
    tracebacks. prometheus_client's own server starts a thread per connection with no timeout.

    When every slot is taken, a new connection evicts the oldest one still in its TLS handshake or
    request head (the next ones are closed at accept only when every slot is past its head). Why
    eviction and not a shorter head deadline or more slots: those only raise what an attacker needs (8
    sockets that sent a request line, reopened every 10 s, refused every scrape), while a scraper sends
    its whole request at once, is past its head within a millisecond and so is never the one evicted;
    a client that stalls before its head ends is the cheapest to drop."""

    daemon_threads = True
    allow_reuse_address = True
    MAX_CLIENTS = 8
    REQUEST_TIMEOUT_S = 5.0
    REQUEST_DEADLINE_S = 10.0
    EVICTION_WAIT_S = 1.0  # for the evicted connection's thread to free its slot (it ends at once)

    def __init__(
        self, address: tuple[str, int], ssl_context: ssl.SSLContext | None = None, reuse_port: bool = False
    ) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.reuse_port = reuse_port
        super().__init__(address, _QuietHandler)
        self.ssl_context = ssl_context
        self._slots = threading.BoundedSemaphore(self.MAX_CLIENTS)
        # Connections whose head has not arrived yet, by address (unique while connected): accepted at.
        self._heads: dict[tuple[str, int], tuple[float, _Request]] = {}
        self._heads_lock = threading.Lock()
        self.refused = 0
        self.evicted = 0
        self.errors = 0
        self._last_log = float("-inf")

    def server_bind(self) -> None:
        # Shared with a successor during a handover (socketserver's allow_reuse_port is 3.11+).
        if self.reuse_port:
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        super().server_bind()

    def process_request(self, request: _Request, client_address: tuple[str, int]) -> None:
        if not self._slots.acquire(blocking=False) and not (
            self._evict_oldest_head() and self._slots.acquire(timeout=self.EVICTION_WAIT_S)
        ):
            self.refused += 1
            self._log(
                f"metrics endpoint: {self.MAX_CLIENTS} clients already served; closing {client_address[0]}"
            )
            self.shutdown_request(request)
            return
        with self._heads_lock:
            self._heads[client_address] = (time.monotonic(), request)
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._forget(client_address, request)
            self._slots.release()
            raise

    def head_read(self, client_address: tuple[str, int]) -> bool:
        """The connection's request head is in; False when it was evicted meanwhile (answer nothing)."""
        with self._heads_lock:
            return self._heads.pop(client_address, None) is not None

    def _forget(self, client_address: tuple[str, int], request: _Request) -> None:
        # Only this connection's entry: once its socket is closed, a new one may reuse the address.
        with self._heads_lock:
            if client_address in self._heads and self._heads[client_address][1] is request:
                del self._heads[client_address]

    def _evict_oldest_head(self) -> bool:
        with self._heads_lock:
            if not self._heads:
                return False
            address = min(self._heads, key=lambda a: self._heads[a][0])
            _, request = self._heads.pop(address)
        self.evicted += 1
        if isinstance(request, socket.socket):
            _cut(request)  # its thread reads EOF, ends and frees the slot
        return True

    def process_request_thread(self, request: _Request, client_address: tuple[str, int]) -> None:
        raw = request
        timer = threading.Timer(self.REQUEST_DEADLINE_S, _cut, (request,))
        timer.daemon = True
        timer.start()
        try:
            if not isinstance(request, socket.socket):  # a datagram server's (bytes, socket): not ours
                raise TypeError("the metrics endpoint serves TCP connections only")
            request.settimeout(self.REQUEST_TIMEOUT_S)
            if self.ssl_context is not None:
                try:
                    request = self.ssl_context.wrap_socket(request, server_side=True)
                except (OSError, ssl.SSLError):
                    self.errors += 1
                    self.shutdown_request(request)
                    return
            super().process_request_thread(request, client_address)
        finally:
            timer.cancel()
            self._forget(client_address, raw)
            self._slots.release()

    def handle_error(self, request: _Request, client_address: tuple[str, int]) -> None:
        self.errors += 1
        self._log(f"metrics endpoint: a request from {client_address[0]} failed (timed out or malformed)")

    def _log(self, message: str) -> None:
        now = time.monotonic()
        if now - self._last_log > 60:
            self._last_log = now
            log.warning("%s (logged once a minute)", message)


def _cut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def _server_tls(tls: TlsConfig) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=tls.ca)
    context.load_cert_chain(tls.cert, tls.key)
    context.verify_mode = ssl.CERT_REQUIRED
    return context


def serve(
    registry: CollectorRegistry,
    listen: str,
    port: int,
    metrics_listen: str | None,
    tls: TlsConfig | None,
    reuse_port: bool = False,
) -> BoundedMetricsServer | None:
    """Start the endpoint in a daemon thread; returns its server (for shutdown) or None when off."""
    address = metrics_address(listen, port, metrics_listen)
    if address is None:
        return None
    if tls is not None:  # npudure_tls_certificate_expiry_timestamp_seconds
        registry.register(CertificateExpiry(tls))
    server = BoundedMetricsServer(address, _server_tls(tls) if tls else None, reuse_port)
    server.set_app(prometheus_client.make_wsgi_app(registry))
    threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()
    return server


def close(server: BoundedMetricsServer) -> None:
    """Stop accepting and close the listener (blocks until serve_forever returns)."""
    server.shutdown()
    server.server_close()
