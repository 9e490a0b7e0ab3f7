"""The central clients' channel config: what makes them ride out a scheduler restart."""

from __future__ import annotations

import json

import pytest

from npudure.client import central
from npudure.client.proxyless import connect


def test_the_service_config_waits_for_a_reconnect_and_retries_a_restarts_errors() -> None:
    options = dict(central.central_options())
    config = json.loads(options["grpc.service_config"])
    method = config["methodConfig"][0]
    assert method["name"] == [{"service": "npudure.v1.Inference"}]
    assert method["waitForReady"] is True
    assert method["retryPolicy"]["retryableStatusCodes"] == ["UNAVAILABLE", "CANCELLED"]
    assert options["grpc.enable_retries"] == 1
    # A 1.2 MB frame must fit the retry buffer, or the call is never retried.
    assert options["grpc.per_rpc_retry_buffer_size"] >= 640 * 640 * 3
    # Back within a quarter of a second of the scheduler's return, not a second or two later.
    assert options["grpc.initial_reconnect_backoff_ms"] <= 100
    assert options["grpc.max_reconnect_backoff_ms"] <= 250
    assert method["retryPolicy"]["initialBackoff"] == "0.05s"


def test_connect_knows_two_modes() -> None:
    with connect("127.0.0.1:1", mode="central") as client:  # channels connect lazily
        assert isinstance(client, central.Central)
    with pytest.raises(ValueError, match="use proxyless or central"):
        connect("127.0.0.1:1", mode="direct")


def test_the_benchmarks_channel_replays_only_the_calls_a_stopping_scheduler_cancels() -> None:
    config = json.loads(dict(central.central_options(retry=False))["grpc.service_config"])
    method = config["methodConfig"][0]
    assert method["waitForReady"] is True
    assert method["retryPolicy"]["retryableStatusCodes"] == ["CANCELLED"]  # UNAVAILABLE is counted
    # the shared default untouched
    assert "UNAVAILABLE" in central.SERVICE_CONFIG["methodConfig"][0]["retryPolicy"]["retryableStatusCodes"]
