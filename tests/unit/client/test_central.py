"""The central clients' channel config: what makes them ride out a scheduler restart."""

from __future__ import annotations

import json

import pytest

from npudure.client import central
from npudure.client.proxyless import connect


def test_the_service_config_waits_for_a_reconnect_and_retries_unavailable() -> None:
    options = dict(central.central_options())
    config = json.loads(options["grpc.service_config"])
    method = config["methodConfig"][0]
    assert method["name"] == [{"service": "npudure.v1.Inference"}]
    assert method["waitForReady"] is True
    assert method["retryPolicy"]["retryableStatusCodes"] == ["UNAVAILABLE"]
    assert options["grpc.enable_retries"] == 1
    # A 1.2 MB frame must fit the retry buffer, or the call is never retried.
    assert options["grpc.per_rpc_retry_buffer_size"] >= 640 * 640 * 3
    assert options["grpc.max_reconnect_backoff_ms"] <= 2000


def test_connect_knows_two_modes() -> None:
    with connect("127.0.0.1:1", mode="central") as client:  # channels connect lazily
        assert isinstance(client, central.Central)
    with pytest.raises(ValueError, match="use proxyless or central"):
        connect("127.0.0.1:1", mode="direct")


def test_the_benchmarks_channel_waits_for_a_reconnect_but_retries_no_server_error() -> None:
    config = json.loads(dict(central.central_options(retry=False))["grpc.service_config"])
    method = config["methodConfig"][0]
    assert method["waitForReady"] is True and "retryPolicy" not in method
    assert "retryPolicy" in central.SERVICE_CONFIG["methodConfig"][0]  # the shared default untouched
