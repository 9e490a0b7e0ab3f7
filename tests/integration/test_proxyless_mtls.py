"""Proxyless over mutual TLS: one channel to every board, each board with its own certificate for its
own address (as on a real fleet), all checked against the fleet name every agent certificate carries."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import numpy as np
import pytest
from helpers.mtls_cluster import as_client, tls_section

import npudure
from npudure.proto import inference_pb2 as pb
from npudure.security import access as security
from npudure.security import pki
from npudure_workshop.lab.local import LocalCluster, free_port

FRAME = np.zeros((640, 640, 3), np.uint8).tobytes()
# Each board on its own loopback address, so no one address matches every certificate.
BOARD_ADDRESSES = {"board1": "127.0.0.2", "board2": "127.0.0.3"}


@contextmanager
def fleet(tmp_path: Path, fleet_name_in_certs: bool) -> Iterator[LocalCluster]:
    ca = tmp_path / "ca"
    pki.make_ca(ca)
    scheduler = pki.issue(ca, "npudure-scheduler", ["127.0.0.1"], tmp_path / "scheduler")
    client = pki.issue(ca, "npudure-admin", [], tmp_path / "client", usage="client")
    boards = {}
    for name, address in BOARD_ADDRESSES.items():
        sans = [address] + ([security.AGENT_FLEET_NAME] if fleet_name_in_certs else [])
        issued = pki.issue(ca, name, sans, tmp_path / name)
        boards[name] = {"listen": f"{address}:{free_port()}", "tls": tls_section(issued)}
    with pytest.MonkeyPatch.context() as mp:
        as_client(mp, client)
        with LocalCluster(
            boards=2,
            time_scale=0.2,
            scheduler_overrides={"tls": tls_section(scheduler)},
            per_board_overrides=boards,
        ) as cluster:
            yield cluster


def _infer(client: object, n: int) -> set[str]:
    request = pb.InferRequest(encoding=pb.ENCODING_RAW_RGB, frame=FRAME)
    return {client.infer(request, timeout=10).node for _ in range(n)}  # type: ignore[attr-defined]


def test_every_board_serves_over_mtls_through_one_proxyless_channel(tmp_path: Path) -> None:
    with fleet(tmp_path, fleet_name_in_certs=True) as cluster, npudure.connect(cluster.address) as client:
        assert client.route.tls
        assert _infer(client, 12) == {"board1", "board2"}


def test_boards_without_the_fleet_name_are_refused_by_the_client(tmp_path: Path) -> None:
    # The control: the same fleet minus the shared name. The client's name check must fail the
    # handshake with every board (gRPC says UNAVAILABLE), not fall back to trusting any CA-signed peer.
    with (
        fleet(tmp_path, fleet_name_in_certs=False) as cluster,
        npudure.connect(cluster.address) as client,
        pytest.raises(grpc.RpcError) as exc,
    ):
        _infer(client, 1)
    assert exc.value.code() == grpc.StatusCode.UNAVAILABLE  # type: ignore[attr-defined]
