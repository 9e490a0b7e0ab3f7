"""Security series of a service: when its TLS files expire, and how many admin calls it refused.

Both are read at scrape time, so a certificate renewed on disk shows its new date at the next scrape
(the service itself reloads it at restart), and no counter has to be threaded through the guard.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from npudure.config import TlsConfig


class CertificateExpiry(Collector):
    """``npudure_tls_certificate_expiry_timestamp_seconds{file}``: notAfter of the cert and its CA."""

    def __init__(self, tls: TlsConfig) -> None:
        self.files = {"cert": tls.cert, "ca": tls.ca}

    def collect(self) -> Iterator[GaugeMetricFamily]:
        # Here, not at the top: cryptography is ~0.3 s of a service's start, and without TLS this
        # collector never runs (a scheduler restart waits for its imports).
        from npudure.security import pki

        family = GaugeMetricFamily(
            "npudure_tls_certificate_expiry_timestamp_seconds",
            "When this service's TLS certificate (file=cert) or its CA (file=ca) expires, Unix time",
            labels=["file", "path"],
        )
        for name, path in self.files.items():
            try:
                cert = pki.load_certificate(path)
            except pki.PkiError:  # unreadable now: no sample (the alert on absence is scrape health)
                continue
            family.add_metric([name, path], cert.not_valid_after_utc.timestamp())
        yield family


class AdminRefusals(Collector):
    """Admin calls refused for want of valid credentials: ``npudure_admin_refused_total`` (present
    from 0, so the first refusal is an increase) and ``npudure_admin_refused_by_method_total{method}``."""

    def __init__(self, refused: Callable[[], Mapping[str, int]]) -> None:
        self._refused = refused

    def collect(self) -> Iterator[CounterMetricFamily]:
        refused = dict(self._refused())
        yield CounterMetricFamily(
            "npudure_admin_refused",
            "Admin calls refused for want of valid credentials",
            value=sum(refused.values()),
        )
        by_method = CounterMetricFamily(
            "npudure_admin_refused_by_method",
            "Admin calls refused for want of valid credentials, by method",
            labels=["method"],
        )
        for method, count in sorted(refused.items()):
            by_method.add_metric([method], count)
        yield by_method
