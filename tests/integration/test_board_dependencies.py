"""The board side runs without the controller's libraries: `npudure agent` (and the other commands a
board's units run) start with matplotlib and rich made unimportable, as on a board's virtualenv; the
controller's commands that need them say which extra to install, in one line."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc

from npudure.security import access as security
from npudure_workshop.lab.local import LocalCluster, _terminate, free_port, wait_serving

CONTROLLER_ONLY = ("matplotlib", "rich")
# A meta-path finder ahead of every other: importing a controller-only package fails as if absent.
FINDER = textwrap.dedent(
    f"""
    import runpy, sys

    class Absent:
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in {CONTROLLER_ONLY!r}:
                raise ImportError(f"No module named {{name!r}} (blocked: not on a board)")
            return None

    sys.meta_path.insert(0, Absent())
    """
)
NPUDURE = (
    'sys.argv = ["npudure", *sys.argv[1:]]\n'
    'runpy.run_module("npudure", run_name="__main__", alter_sys=True)\n'
)


def _blocked(*args: str) -> list[str]:
    """``npudure ARGS`` in a child interpreter where matplotlib and rich cannot be imported."""
    return [sys.executable, "-c", FINDER + NPUDURE, *args]


def _run_blocked(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(_blocked(*args), capture_output=True, text=True, timeout=120)


def test_the_block_really_blocks() -> None:
    done = subprocess.run(
        [sys.executable, "-c", FINDER + "import rich"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0 and "blocked: not on a board" in done.stderr


@pytest.mark.parametrize("command", [["agent"], ["affinity", "apply"], ["pki", "csr"], ["status"]])
def test_board_commands_parse_their_arguments_without_controller_libraries(command: list[str]) -> None:
    done = _run_blocked(*command, "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: npudure " + " ".join(command)), done.stdout


def _agent_config(tmp_path: Path, address: str) -> Path:
    config = tmp_path / "agent.yml"
    token = security.write_token(tmp_path / "admin-token")
    config.write_text(
        yaml.safe_dump(
            {
                "node_name": "bare-board",
                "listen": address,
                "metrics_port": free_port(),
                "backend": "sim",
                "npu_cores": 1,
                "affinity": {"sysfs_root": str(tmp_path / "no-sysfs")},
                "admin": {"token_file": str(token)},
            }
        )
    )
    return config


def test_agent_checks_and_serves_without_controller_libraries(tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port()}"
    config = _agent_config(tmp_path, address)
    check = _run_blocked("agent", "--config", str(config), "--check")
    assert check.returncode == 0, check.stderr
    log = tmp_path / "agent.log"
    with log.open("wb") as out:
        agent = subprocess.Popen(_blocked("agent", "--config", str(config)), stdout=out, stderr=out)
    try:
        wait_serving(address, 60, agent)
        with security.channel(address) as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING, log.read_text()
    finally:
        _terminate(agent)
    assert "blocked" not in log.read_text()


def test_the_cluster_table_names_the_extra_when_rich_is_missing_and_json_needs_none() -> None:
    with LocalCluster(boards=1, time_scale=5.0) as cluster:
        table = _run_blocked("status", "--target", cluster.address)
        as_json = _run_blocked("status", "--target", cluster.address, "--json")
    assert table.returncode == 1 and "Traceback" not in table.stderr, table.stderr
    assert table.stderr.strip().splitlines() == [
        "npudure status: the cluster table needs rich, which comes with the 'controller' extra: "
        "pip install 'npudure[controller]'"
    ]
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout)["boards"][0]["name"] == "board1"
