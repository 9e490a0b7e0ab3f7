"""Integration: with the scheduler's TLS on, the HTTP API speaks HTTPS with its certificate, and by
default asks for a client certificate of the fleet's CA, like the gRPC port."""

from __future__ import annotations

import pytest
import requests
from helpers.deepstack_requests import jpeg
from helpers.mtls_cluster import as_client, tls_section

from npudure.security import pki
from npudure.vision.frames import synthetic_frame
from npudure_workshop.lab.local import LocalCluster


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> dict[str, pki.Issued]:
    root = tmp_path_factory.mktemp("pki")
    pki.make_ca(root / "ca")
    return {
        "agent": pki.issue(root / "ca", "board", ["127.0.0.1"], root / "agent"),
        "scheduler": pki.issue(root / "ca", "npudure-scheduler", ["127.0.0.1"], root / "scheduler"),
        "admin": pki.issue(root / "ca", "npudure-admin", [], root / "admin", usage="client"),
        "camera": pki.issue(root / "ca", "camera", [], root / "camera", usage="client"),
    }


@pytest.fixture(scope="module", params=[True, False], ids=["client-auth", "server-only"])
def tls_cluster(request, certs):
    with pytest.MonkeyPatch.context() as mp:
        as_client(mp, certs["admin"])
        with LocalCluster(
            boards=1,
            time_scale=2.0,
            http_api=True,
            agent_overrides={"tls": tls_section(certs["agent"])},
            scheduler_overrides={
                "tls": tls_section(certs["scheduler"]),
                "http_api": {"tls_client_auth": request.param},
            },
        ) as cluster:
            yield cluster, request.param


def test_https_with_the_schedulers_certificate(tls_cluster, certs) -> None:
    cluster, client_auth = tls_cluster
    url = cluster.http_url
    assert url.startswith("https://")
    image = {"image": jpeg(synthetic_frame(1, 320))}
    ca = str(certs["camera"].ca)
    with pytest.raises(requests.exceptions.SSLError):
        requests.post(url, files=image, timeout=10)  # the fleet CA is not in the system's trust store
    camera = (str(certs["camera"].cert), str(certs["camera"].key))
    ok = requests.post(url, files=image, verify=ca, cert=camera, timeout=10)
    assert ok.status_code == 200 and ok.json()["success"] is True
    if client_auth:
        with pytest.raises(requests.exceptions.ConnectionError):
            requests.post(url, files=image, verify=ca, timeout=10)
    else:
        anonymous = requests.post(url, files=image, verify=ca, timeout=10)
        assert anonymous.status_code == 200
