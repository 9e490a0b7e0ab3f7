"""Smoke test of benchmarks/forwarding.py: it runs end to end (--quick) and prints every figure.

No speed is asserted: the figures are whatever this machine gives. What is checked is that every
path carried requests without errors and that every figure and verdict line is there.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from npudure.scheduler.policies import POLICIES
from npudure_workshop.bench.forwarding.nginx import nginx_config, nginx_version

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "forwarding.py"
NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)

FIGURE_LABELS = (
    "sim (EMULATED NPU)",
    "1. Forwarding capacity",
    "req/s",
    "proxy CPU-ms/req",
    "proxy core",
    "1-core bound",
    "gen CPU-ms/req",
    "gen core",
    "agents CPU-ms/req",
    "2. Latency added at concurrency 1",
    "added p50 ms",
    "added p99 ms",
    "3. Routing decision time",
    "route_us",
    "scheduler_queue_us",
    "Dispatcher reserve+release",
    "4. Against the issue's targets",
    "nginx forwarding capacity",
    "ms added p50 (scheduler)",
)


def run_quick(tmp_path: Path, *extra: str) -> tuple[str, dict]:
    out = tmp_path / "forwarding.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--out", str(out), *extra],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
    )
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc.stdout, json.loads(out.read_text())


def capacity_rows(stdout: str) -> set[str]:
    """The path names of the capacity table: the lines between its header and its legend."""
    lines = stdout.split("1. Forwarding capacity", 1)[1].splitlines()[2:]
    rows = []
    for line in lines:
        if line.startswith("  proxy core:"):
            break
        rows.append(line.split()[0])
    return set(rows)


@pytest.mark.skipif(NGINX is None, reason="nginx is not installed (apt-get install nginx-light)")
def test_quick_run_prints_every_figure_for_scheduler_nginx_and_direct(tmp_path):
    stdout, results = run_quick(tmp_path)
    for label in FIGURE_LABELS:
        assert label in stdout, f"{label!r} missing from the output:\n{stdout}"
    for name in POLICIES:
        assert f"policy {name}" in stdout
    assert {"scheduler", "nginx", "proxyless", "direct"} <= capacity_rows(stdout)
    assert "capacity scheduler/nginx" in stdout
    assert "REACHED" in stdout  # both verdict lines say REACHED or NOT REACHED, never nothing

    runs = results["capacity_runs"]
    assert {r["target"] for r in runs} == {"scheduler", "nginx", "proxyless", "direct"}
    for run in runs:
        assert run["completed"] > 0 and run["errors"] == {}, run
    assert results["summary"]["capacity"]["scheduler"]["proxy_cpu_ms_per_req"] > 0
    assert results["summary"]["capacity"]["nginx"]["proxy_cpu_ms_per_req"] > 0
    assert results["summary"]["capacity"]["proxyless"]["proxy_cpu_ms_per_req"] is None  # no proxy
    for target in ("scheduler", "nginx", "proxyless", "direct"):
        assert results["summary"]["latency"][target]["n"] > 0
    # The scheduler answered with its in-band timing: a board call takes time on a real socket.
    assert results["summary"]["inband_concurrency_1"]["network_to_board_us"]["p50"] > 0
    assert len(results["routing_microbench"]) == 3 * (len(POLICIES) + 1)
    assert all(r["us_per_decision"] > 0 for r in results["routing_microbench"])
    assert set(results["summary"]["targets"]) == {"capacity_ratio", "added_p50_ms", "proxyless"}
    assert "proxyless ≥ 0.98× direct" in stdout and "added p50 (proxyless)" in stdout


def test_without_nginx_the_peer_is_skipped_with_install_advice(tmp_path):
    stdout, results = run_quick(tmp_path, "--nginx", str(tmp_path / "no-such-nginx"))
    assert "SKIPPED" in stdout and "apt-get install nginx-light" in stdout
    assert "NOT MEASURED (no nginx)" in stdout
    assert capacity_rows(stdout) == {"scheduler", "proxyless", "direct"}
    assert all(r["completed"] > 0 for r in results["capacity_runs"])


@pytest.mark.parametrize(
    ("version", "listen"),
    [
        ((1, 22, 1), "listen 127.0.0.1:18080 http2;"),
        ((1, 25, 1), "listen 127.0.0.1:18080;\n        http2 on;"),
    ],
)
def test_nginx_config_uses_the_http2_syntax_of_its_version(version, listen):
    conf = nginx_config(Path("/tmp/x"), "127.0.0.1:18080", ["127.0.0.1:1", "127.0.0.1:2"], 8, version)
    assert listen in conf
    assert ("http2 on;" in conf) == (version >= (1, 25, 1))
    for line in (
        "worker_processes 1;",
        "least_conn;",
        "server 127.0.0.1:2;",
        "keepalive 8;",
        "grpc_pass grpc://npudure_agents;",
        "client_max_body_size 8m;",
    ):
        assert line in conf


@pytest.mark.skipif(NGINX is None, reason="nginx is not installed (apt-get install nginx-light)")
def test_installed_nginx_accepts_the_generated_config(tmp_path):
    version = nginx_version(NGINX)
    assert version is not None
    conf = tmp_path / "nginx.conf"
    conf.write_text(nginx_config(tmp_path, "127.0.0.1:18080", ["127.0.0.1:1"], 4, version))
    check = subprocess.run(
        [NGINX, "-e", str(tmp_path / "error.log"), "-p", f"{tmp_path}/", "-c", str(conf), "-t"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert check.returncode == 0, check.stderr
