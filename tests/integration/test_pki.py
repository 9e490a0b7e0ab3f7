"""Mutual TLS handshakes over real gRPC with the issued certificates (moved from tests/unit: they serve on
127.0.0.1)."""

from __future__ import annotations

from concurrent import futures
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from helpers.pki_fleet import make_fleet

from npudure.security import pki


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> dict[str, Path | pki.Issued]:
    """helpers/pki_fleet.py's CAs and certificates, made once per module."""
    return make_fleet(tmp_path_factory.mktemp("pki"))


# ---------------------------------------------------------------------- a real mutual-TLS handshake
_WHO = "/npudure.test.Who/Am"


def _serve(server_cert: pki.Issued, ca: Path) -> tuple[grpc.Server, int]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = health.HealthServicer()
    servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)

    def who(_request: bytes, context: grpc.ServicerContext) -> bytes:
        return b",".join(context.auth_context().get("x509_common_name", []))

    handler = grpc.method_handlers_generic_handler(
        "npudure.test.Who", {"Am": grpc.unary_unary_rpc_method_handler(who)}
    )
    server.add_generic_rpc_handlers((handler,))
    credentials = grpc.ssl_server_credentials(
        [(server_cert.key.read_bytes(), server_cert.cert.read_bytes())],
        root_certificates=ca.read_bytes(),
        require_client_auth=True,
    )
    port = server.add_secure_port("127.0.0.1:0", credentials)
    server.start()
    return server, port


def _call(port: int, ca: Path, client: pki.Issued | None) -> tuple[int, bytes]:
    # Positional: root certificates, the client's key, its certificate chain (None, None = no client cert).
    identity = (client.key.read_bytes(), client.cert.read_bytes()) if client else (None, None)
    credentials = grpc.ssl_channel_credentials(ca.read_bytes(), *identity)
    with grpc.secure_channel(f"127.0.0.1:{port}", credentials) as channel:
        status = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5).status
        who = channel.unary_unary(_WHO)(b"", timeout=5)
    return status, who


def test_mutual_tls_handshake_with_issued_certificates(fleet):
    server, port = _serve(fleet["server"], fleet["ca"])
    try:
        assert _call(port, fleet["ca"], fleet["admin"]) == (
            health_pb2.HealthCheckResponse.SERVING,
            b"npudure-admin",
        )
        assert _call(port, fleet["ca"], fleet["viewer"]) == (
            health_pb2.HealthCheckResponse.SERVING,
            b"viewer",
        )
        for stranger in (fleet["intruder"], None):  # another CA's cert (same CA name), no cert at all
            with pytest.raises(grpc.RpcError) as exc:
                _call(port, fleet["ca"], stranger)
            assert exc.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        server.stop(0)


def test_a_server_certificate_without_the_dialled_ip_is_rejected(tmp_path, fleet):
    named_only = pki.issue(fleet["ca_dir"], "board3", ["board3.lan"], tmp_path)
    server, port = _serve(named_only, fleet["ca"])
    try:
        with pytest.raises(grpc.RpcError) as exc:
            _call(port, fleet["ca"], fleet["admin"])
        assert exc.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        server.stop(0)
