"""Security series: TLS expiry read from the files at scrape time, admin refusals counted by the guard."""

from __future__ import annotations

import grpc
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from npudure.config import AdminConfig, TlsConfig
from npudure.security import access, pki
from npudure.security.metrics import AdminRefusals, CertificateExpiry


def scrape(collector) -> str:
    registry = CollectorRegistry()
    registry.register(collector)
    return generate_latest(registry).decode()


def test_expiry_of_the_certificate_and_its_ca(tmp_path) -> None:
    pki.make_ca(tmp_path / "ca")
    leaf = pki.issue(tmp_path / "ca", "board", ["127.0.0.1"], tmp_path / "srv")
    tls = TlsConfig(ca=str(leaf.ca), cert=str(leaf.cert), key=str(leaf.key))
    text = scrape(CertificateExpiry(tls))
    cert = pki.load_certificate(leaf.cert).not_valid_after_utc.timestamp()
    ca = pki.load_certificate(leaf.ca).not_valid_after_utc.timestamp()
    values = {
        line.split('file="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("npudure_tls_certificate_expiry_timestamp_seconds{")
    }
    assert values == {"cert": cert, "ca": ca}


def test_an_unreadable_certificate_has_no_sample(tmp_path) -> None:
    tls = TlsConfig(ca=str(tmp_path / "missing-ca.crt"), cert=str(tmp_path / "missing.crt"), key="k")
    assert "npudure_tls_certificate_expiry_timestamp_seconds{" not in scrape(CertificateExpiry(tls))


class _Context:
    """What AdminGuard.check reads from a gRPC context, and where it aborts."""

    def __init__(self, token: str = "") -> None:
        self.token = token

    def invocation_metadata(self):
        return (("authorization", f"Bearer {self.token}"),) if self.token else ()

    def auth_context(self):
        return {}

    def peer(self) -> str:
        return "ipv4:127.0.0.1:1"

    async def abort(self, code: grpc.StatusCode, message: str):
        raise PermissionError(code, message)


async def test_refused_admin_calls_are_counted_and_allowed_ones_are_not(tmp_path) -> None:
    token_file = access.write_token(tmp_path / "token")
    guard = access.AdminGuard(AdminConfig(token_file=str(token_file)), None)
    collector = AdminRefusals(lambda: guard.refused)
    assert "npudure_admin_refused_total 0.0" in scrape(collector)  # present before the first refusal
    for _ in range(2):
        with pytest.raises(PermissionError):
            await guard.check(_Context(), "DrainNode")
    with pytest.raises(PermissionError):
        await guard.check(_Context("wrong-token-of-some-length"), "SetCpuCap")
    await guard.check(_Context(access.read_token(str(token_file))), "DrainNode")
    text = scrape(collector)
    assert "npudure_admin_refused_total 3.0" in text
    assert 'npudure_admin_refused_by_method_total{method="DrainNode"} 2.0' in text
    assert 'npudure_admin_refused_by_method_total{method="SetCpuCap"} 1.0' in text
