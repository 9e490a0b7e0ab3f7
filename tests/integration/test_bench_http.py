"""Integration: `npudure bench --api http` drives the scheduler's HTTP API, and `npudure local` serves it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import requests
from helpers.bench_api import openloop_through
from helpers.cli import run_npudure

from npudure_workshop.lab.local import LocalCluster


def test_bench_openloop_through_the_http_api(tmp_path: Path) -> None:
    with LocalCluster(boards=2, time_scale=10.0, http_api=True) as cluster:
        url = cluster.http_url
        options = ("--http-url", url, "--http-image-size", "480x270")
        manifest, _ = openloop_through(cluster.address, tmp_path / "http", "http", *options)
    assert manifest["settings"]["http_url"] == url
    assert "480x270 JPEG" in manifest["frames"]["frame_source"]


def test_bench_refuses_http_with_proxyless(tmp_path: Path) -> None:
    proc = run_npudure(
        "bench", "openloop", "--target", "127.0.0.1:1", "--rates", "10",
        "--api", "http", "--mode", "proxyless",
    )  # fmt: skip
    assert proc.returncode != 0 and "--api http goes through the scheduler" in proc.stderr


def test_npudure_local_prints_the_http_url_and_serves_it(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "npudure", "local", "--boards", "1", "--port", "0", "--http-port", "0",
         "--time-scale", "5", "--workdir", str(tmp_path / "w")],
        stdout=subprocess.PIPE, text=True, start_new_session=True, env={**os.environ},
    )  # fmt: skip
    try:
        deadline, url = time.monotonic() + 90, ""
        assert proc.stdout is not None
        while time.monotonic() < deadline and not url:
            line = proc.stdout.readline()
            if not line:
                break
            if line.startswith("HTTP API"):
                url = line.split()[-1]
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1/vision/detection")
        ping = requests.get(url.replace("/v1/vision/detection", "/v1/server/status/ping"), timeout=5)
        assert ping.json()["success"] is True
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
