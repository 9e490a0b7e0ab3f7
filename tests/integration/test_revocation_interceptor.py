"""The revocation interceptor on an in-process grpc.aio server with mutual TLS: a unary call and a
streaming one (health Watch, which writes with context.write) are refused UNAUTHENTICATED for a
listed certificate and served for another, with one warning in the log for many refusals; the
server's own interceptors still run after it."""

from __future__ import annotations

import logging
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from npudure.config import ServerLimits, TlsConfig
from npudure.security import access, crl, pki
from npudure.security.revocation import RevocationCheck, Revocations
from npudure.service import grpc_limits


@pytest.fixture
def issued(tmp_path: Path) -> dict[str, pki.Issued]:
    ca = tmp_path / "ca"
    pki.make_ca(ca)
    made = {
        "server": pki.issue(ca, "board1", ["127.0.0.1"], tmp_path / "s"),
        "revoked": pki.issue(ca, "gone", [], tmp_path / "c", usage="client-only"),
        "kept": pki.issue(ca, "kept", [], tmp_path / "c", usage="client-only"),
    }
    crl.revoke(ca, cert=made["revoked"].cert)
    return made


def _tls(issued: pki.Issued) -> TlsConfig:
    return TlsConfig(ca=str(issued.ca), cert=str(issued.cert), key=str(issued.key))


async def _calls(address: str, client: pki.Issued) -> tuple[grpc.StatusCode, grpc.StatusCode, str]:
    """The status of a Check and of a Watch's first reply, and the Check's details."""
    async with grpc.aio.secure_channel(address, access.channel_credentials(_tls(client))) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            await stub.Check(health_pb2.HealthCheckRequest(), timeout=5)
            check, details = grpc.StatusCode.OK, ""
        except grpc.aio.AioRpcError as exc:
            check, details = exc.code(), exc.details() or ""
        watch = stub.Watch(health_pb2.HealthCheckRequest(), timeout=5)
        try:
            await watch.read()
            streamed = grpc.StatusCode.OK
        except grpc.aio.AioRpcError as exc:
            streamed = exc.code()
        watch.cancel()
    return check, streamed, details


async def test_a_listed_certificate_is_refused_on_unary_and_streaming_calls(
    issued, caplog: pytest.LogCaptureFixture
) -> None:
    revocations = Revocations(_tls(issued["server"]))
    server = grpc_limits.server(ServerLimits(), 1 << 20, 16, interceptors=[RevocationCheck(revocations)])
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
    port = access.add_port(server, "127.0.0.1:0", _tls(issued["server"]))
    await server.start()
    try:
        address = f"127.0.0.1:{port}"
        check, watch, details = await _calls(address, issued["revoked"])
        assert (check, watch) == (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.UNAUTHENTICATED)
        assert "is revoked" in details and revocations.path in details
        await _calls(address, issued["revoked"])
        # Four refused calls, one warning: a revoked client retrying in a loop cannot fill the journal.
        refused = [r for r in caplog.records if "is revoked" in r.getMessage()]
        assert len(refused) == 1 and refused[0].levelno == logging.WARNING, refused
        assert (await _calls(address, issued["kept"]))[:2] == (grpc.StatusCode.OK, grpc.StatusCode.OK)
        revocations.apply(frozenset())  # what a reload to an empty list does: served again
        assert (await _calls(address, issued["revoked"]))[:2] == (grpc.StatusCode.OK, grpc.StatusCode.OK)
    finally:
        await server.stop(grace=0)


async def test_each_check_reports_its_cpu_time(issued) -> None:
    checked: list[int] = []
    revocations = Revocations(_tls(issued["server"]))
    check = RevocationCheck(revocations, on_checked=checked.append)
    server = grpc_limits.server(ServerLimits(), 1 << 20, 16, interceptors=[check])
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
    port = access.add_port(server, "127.0.0.1:0", _tls(issued["server"]))
    await server.start()
    try:
        served = await _calls(f"127.0.0.1:{port}", issued["kept"])
        refused = await _calls(f"127.0.0.1:{port}", issued["revoked"])
    finally:
        await server.stop(grace=0)
    assert served[:2] == (grpc.StatusCode.OK, grpc.StatusCode.OK)
    assert refused[:2] == (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.UNAUTHENTICATED)
    # One figure per call, served or refused (the agent's peer_check stage), each a real CPU time.
    assert len(checked) == 4 and all(ns > 0 for ns in checked), checked
