"""A LocalCluster whose agents and scheduler require mutual TLS, and the client TLS environment; shared
by test_security.py, test_admin_locked.py and test_proxyless_mtls.py."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from npudure.security import access as security
from npudure.security import pki
from npudure_workshop.lab.local import LocalCluster


def tls_section(issued: pki.Issued) -> dict[str, str]:
    """The ``tls:`` section of an agent or scheduler config presenting ``issued``."""
    return {"ca": str(issued.ca), "cert": str(issued.cert), "key": str(issued.key)}


def as_client(monkeypatch: pytest.MonkeyPatch, issued: pki.Issued | None) -> None:
    """This process's npudure clients present ``issued`` (NPUDURE_TLS_*); None: no TLS identity."""
    for var, value in zip(
        (security.ENV_CA, security.ENV_CERT, security.ENV_KEY),
        (issued.ca, issued.cert, issued.key) if issued else (None, None, None),
        strict=True,
    ):
        if value is None:
            monkeypatch.delenv(var, raising=False)
        else:
            monkeypatch.setenv(var, str(value))


@contextmanager
def mtls_cluster(certs: dict[str, pki.Issued], client: pki.Issued, boards: int) -> Iterator[LocalCluster]:
    """``boards`` agents (certs["agent"]) and a scheduler (certs["scheduler"]) on loopback; the client
    TLS environment presents ``client`` while the cluster is up (its start-up health checks speak mTLS
    too) and is restored afterwards."""
    with pytest.MonkeyPatch.context() as mp:
        as_client(mp, client)
        with LocalCluster(
            boards=boards,
            time_scale=5.0,
            agent_overrides={"tls": tls_section(certs["agent"])},
            scheduler_overrides={"tls": tls_section(certs["scheduler"])},
        ) as cluster:
            yield cluster
