"""Monitoring on the emulated fleet (root): site.yml deploys Prometheus on the scheduler host with the
repository's rules, and the alerts fire and resolve against the real services.

- Prometheus' targets API shows every agent (labelled with its inventory name) and the scheduler up;
- a stopped agent raises NpudureBoardDown within the rule's ``for:`` (1 min) plus two scrape
  intervals and one evaluation, and the alert resolves once the agent is back;
- a board an operator drained first raises no NpudureBoardDown when its agent stops;
- under load, a board whose (emulated) CPU clock is capped raises NpudureBoardClockDiverging.

Scrape and evaluation every 5 s (the role's defaults are 15 s). Uses a running lab like
tests/appliance/test_site.py, or boots one and removes it. Takes about 15 minutes:
    sudo .venv/bin/pytest -m lab tests/appliance/test_monitoring_lab.py
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from loadgen import run_closed_loop
from test_site import BIN, ROOT, _run, fleet, source  # noqa: F401 (fixtures)

from npudure.proto import inference_pb2 as pb
from npudure.proto import inference_pb2_grpc as rpc
from npudure.security import access as security

pytestmark = [pytest.mark.lab, pytest.mark.slow, pytest.mark.timeout(2400)]

SCRAPE_S = 5.0
DOWN_FOR_S = 60.0  # NpudureBoardDown's for: in monitoring/rules/npudure-alerts.yml
CLOCK_FOR_S = 300.0  # NpudureBoardClockDiverging's
SLACK_S = 10.0  # API polling and a loaded 2-core host


def _hosts(inventory: Path, group: str) -> dict[str, dict]:
    return yaml.safe_load(inventory.read_text())["all"]["children"][group]["hosts"]


@pytest.fixture(scope="module")
def monitored(fleet: Path, source: Path) -> Iterator[dict]:  # noqa: F811
    extra = {
        "npudure_wheelhouse_project_dir": str(source),
        "npudure_monitoring_scrape_interval": f"{SCRAPE_S:.0f}s",
        "npudure_monitoring_scrape_timeout": "4s",
        "npudure_monitoring_evaluation_interval": f"{SCRAPE_S:.0f}s",
    }
    done = _run(
        [BIN / "ansible-playbook", "-i", fleet, "-e", json.dumps(extra), ROOT / "playbooks" / "site.yml"],
        timeout=1800,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-8000:]
    sched = next(iter(_hosts(fleet, "scheduler").values()))["ansible_host"]
    yield {
        "inventory": fleet,
        "prometheus": f"http://{sched}:9090",
        "scheduler": f"{sched}:50050",
        "boards": list(_hosts(fleet, "boards")),
    }


def _api(base: str, path: str) -> dict:
    with urllib.request.urlopen(f"{base}/api/v1/{path}", timeout=10) as reply:
        body = json.loads(reply.read())
    assert body["status"] == "success", body
    return body["data"]


def _alerts(base: str, name: str, state: str | None = None) -> list[dict]:
    return [
        a
        for a in _api(base, "alerts")["alerts"]
        if a["labels"]["alertname"] == name and (state is None or a["state"] == state)
    ]


def _wait(what: str, check: Callable[[], bool], timeout_s: float, every: Callable[[], None] = lambda: None):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        every()
        if check():
            return
        time.sleep(1.0)
    raise AssertionError(f"{what} within {timeout_s:.0f}s")


def _agent(board: str, action: str) -> None:
    done = _run(
        [BIN / "npudure", "lab", "exec", board, "--", "systemctl", action, "npudure-agent"], timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _cluster(address: str) -> rpc.ClusterStub:
    return rpc.ClusterStub(security.channel(address))


def test_prometheus_scrapes_every_service(monitored: dict) -> None:
    def all_up() -> bool:
        targets = _api(monitored["prometheus"], "targets?state=active")["activeTargets"]
        npudure = [t for t in targets if t["labels"]["job"].startswith("npudure")]
        return len(npudure) == len(monitored["boards"]) + 1 and all(t["health"] == "up" for t in npudure)

    _wait("every agent and the scheduler up", all_up, 60)
    targets = _api(monitored["prometheus"], "targets?state=active")["activeTargets"]
    boards = sorted(t["labels"]["board"] for t in targets if t["labels"]["job"] == "npudure_agent")
    assert boards == sorted(monitored["boards"])
    rules = _api(monitored["prometheus"], "rules")["groups"]
    assert {g["name"] for g in rules} >= {"npudure.recording", "npudure.alerts"}


def test_a_stopped_agent_raises_board_down_and_it_resolves(monitored: dict) -> None:
    board, base = monitored["boards"][0], monitored["prometheus"]
    stopped = time.monotonic()
    _agent(board, "stop")
    try:
        _wait(
            f"NpudureBoardDown firing for {board}",
            lambda: board in [a["labels"]["board"] for a in _alerts(base, "NpudureBoardDown", "firing")],
            DOWN_FOR_S + 2 * SCRAPE_S + SCRAPE_S + SLACK_S,
        )
        print(
            f"\nNpudureBoardDown fired {time.monotonic() - stopped:.0f}s after the stop (for 60s, scrape 5s)"
        )
    finally:
        _agent(board, "start")
    _wait(
        "NpudureBoardDown to resolve",
        lambda: board not in [a["labels"]["board"] for a in _alerts(base, "NpudureBoardDown")],
        90,
    )


def test_a_drained_board_raises_no_board_down(monitored: dict) -> None:
    board, base = monitored["boards"][1], monitored["prometheus"]
    admin = _cluster(monitored["scheduler"])
    admin.DrainNode(pb.DrainNodeRequest(node=board, drain=True), timeout=10)
    _agent(board, "stop")
    try:

        def quiet() -> None:
            assert board not in [a["labels"]["board"] for a in _alerts(base, "NpudureBoardDown")]

        # As long as a board that was not drained takes to fire, and then some.
        deadline = time.monotonic() + DOWN_FOR_S + 3 * SCRAPE_S + SLACK_S
        while time.monotonic() < deadline:
            quiet()
            time.sleep(1.0)
    finally:
        _agent(board, "start")
        admin.DrainNode(pb.DrainNodeRequest(node=board, drain=False), timeout=10)


def test_a_capped_board_under_load_raises_clock_divergence(monitored: dict) -> None:
    board, base = monitored["boards"][-1], monitored["prometheus"]
    admin = _cluster(monitored["scheduler"])
    budget = CLOCK_FOR_S + 120 + 2 * SCRAPE_S + SCRAPE_S + SLACK_S  # the rule's 2-minute average, then for:
    load = threading.Thread(target=run_closed_loop, args=(monitored["scheduler"], 6, budget), daemon=True)
    load.start()
    admin.SetNodeCpuCap(pb.SetNodeCpuCapRequest(node=board, mhz=600), timeout=10)
    try:
        _wait(
            f"NpudureBoardClockDiverging firing for {board}",
            lambda: (
                [a["labels"]["board"] for a in _alerts(base, "NpudureBoardClockDiverging", "firing")]
                == [board]
            ),
            budget,
        )
    finally:
        admin.SetNodeCpuCap(pb.SetNodeCpuCapRequest(node=board, mhz=0), timeout=10)
    load.join(timeout=budget + 60)  # the load stops by itself
