"""The alert rules against real services: three agents and a scheduler on loopback, scraped by a real
Prometheus whose configuration the npudure_monitoring role's template rendered (real Ansible).

A killed agent raises NpudureBoardDown within the rule's ``for:`` plus two scrape intervals (and one
rule evaluation, the only moment an alert changes state), and it resolves after the agent is back; a
board an operator drained first raises none. A board whose (fake) sysfs reads 83 °C, within 5 °C of its
85 °C passive trip point, raises NpudureBoardHot. Short intervals keep it bounded (< 90 s).
"""

from __future__ import annotations

import subprocess
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import promtool
from fake_board_sysfs import FakeBoardSysfs
from prometheus_server import Prometheus, copy_rules, render_config

from npudure.lab.local import LocalCluster, free_port
from npudure.proto import inference_pb2 as pb
from npudure.proto import inference_pb2_grpc as rpc
from npudure.security import access as security

SCRAPE_S = 1.0
EVAL_S = 1.0
DOWN_FOR_S = 5.0
HOT_FOR_S = 2.0
# Polling the API and a loaded 2-core box: a little on top of the bound the rules promise.
SLACK_S = 5.0
BOARDS = ("board1", "board2", "board3")


def wait_for(
    what: str, check: Callable[[], bool], timeout_s: float, every: Callable[[], None] = lambda: None
):
    """Poll ``check`` until true; ``every`` runs at each poll (an assertion that must hold throughout)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        every()
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"{what} within {timeout_s:.0f}s")


def drain(address: str, board: str) -> None:
    with security.channel(address) as channel:
        rpc.ClusterStub(channel).DrainNode(pb.DrainNodeRequest(node=board, drain=True), timeout=5)


def test_board_down_fires_and_resolves_and_a_drained_board_stays_quiet(tmp_path: Path) -> None:
    sysfs = {name: FakeBoardSysfs(tmp_path / f"sysfs-{name}") for name in BOARDS}
    agent_ports = {name: free_port() for name in BOARDS}
    scheduler_port, prometheus_port = free_port(), free_port()
    rules = copy_rules(
        tmp_path / "rules", {"NpudureBoardDown": f"{DOWN_FOR_S:.0f}s", "NpudureBoardHot": f"{HOT_FOR_S:.0f}s"}
    )
    # Ansible renders the configuration while the cluster starts (both mostly wait on subprocesses).
    pool = ThreadPoolExecutor(max_workers=1)
    rendering = pool.submit(
        render_config,
        tmp_path,
        agent_ports,
        scheduler_port,
        {
            "npudure_monitoring_scrape_interval": f"{SCRAPE_S:.0f}s",
            "npudure_monitoring_scrape_timeout": "900ms",
            "npudure_monitoring_evaluation_interval": f"{EVAL_S:.0f}s",
            "npudure_monitoring_rules_dir": str(rules),
            "npudure_monitoring_port": prometheus_port,
        },
    )
    overrides = {
        name: {"metrics_port": agent_ports[name], "affinity": {"sysfs_root": str(sysfs[name].root)}}
        for name in BOARDS
    }
    with (
        LocalCluster(
            boards=3,
            per_board_overrides=overrides,
            scheduler_overrides={"metrics_port": scheduler_port},
            workdir=tmp_path / "cluster",
        ) as cluster,
        Prometheus(rendering.result(), tmp_path, port=prometheus_port) as prom,
    ):
        pool.shutdown()

        # Every service is a target, up, with its board label.
        def all_up() -> bool:
            targets = prom.targets()
            return len(targets) == 5 and all(t["health"] == "up" for t in targets)

        wait_for("all five targets up", all_up, 30)
        labels = {(t["labels"]["job"], t["labels"].get("board")) for t in prom.targets()}
        assert labels == {
            *(("npudure_agent", name) for name in BOARDS),
            ("npudure_scheduler", None),
            ("prometheus", None),
        }

        # What they export passes promtool's linter, board telemetry included.
        texts = {}
        for name, port in (*agent_ports.items(), ("scheduler", scheduler_port)):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
                texts[name] = reply.read().decode()
            linted = subprocess.run(
                [promtool.require(), "check", "metrics"],
                input=texts[name],
                capture_output=True,
                text=True,
                timeout=30,
            )
            assert linted.returncode == 0, f"{name}: {linted.stdout}{linted.stderr}"
        assert (
            'npudure_board_thermal_trip_celsius{trip="0",type="passive",zone="soc-thermal"} 85.0'
            in texts["board1"]
        )

        # board3: drained by an operator, then stopped — maintenance, no alert.
        drain(cluster.address, "board3")
        wait_for(
            "the drained flag of board3 in Prometheus",
            lambda: (
                [r["value"][1] for r in prom.query('npudure_scheduler_board_drained{board="board3"}')]
                == ["1"]
            ),
            10,
        )

        def board3_quiet() -> None:
            boards = [a["labels"]["board"] for a in prom.alerts("NpudureBoardDown")]
            assert "board3" not in boards, "the drained board3 raised NpudureBoardDown"

        killed = time.monotonic()
        cluster.kill_agent("board1")
        cluster.kill_agent("board3")
        bound = DOWN_FOR_S + 2 * SCRAPE_S + EVAL_S
        wait_for(
            "NpudureBoardDown firing for board1",
            lambda: [a["labels"]["board"] for a in prom.alerts("NpudureBoardDown", "firing")] == ["board1"],
            bound + SLACK_S,
            every=board3_quiet,
        )
        fired_s = time.monotonic() - killed
        firing = prom.alerts("NpudureBoardDown", "firing")[0]
        assert firing["labels"]["severity"] == "critical"
        assert firing["annotations"]["runbook_url"] == "docs/alerts.md#npudureboarddown"
        print(
            f"\nNpudureBoardDown fired {fired_s:.1f}s after the kill "
            f"(for {DOWN_FOR_S:.0f}s, scrape and evaluation every {SCRAPE_S:.0f}s)"
        )
        # board3 has been down as long as board1 was when it fired, and longer: still no alert.
        time.sleep(DOWN_FOR_S)
        board3_quiet()

        cluster.restart_agent("board1")
        back = time.monotonic()
        wait_for(
            "NpudureBoardDown to resolve",
            lambda: prom.alerts("NpudureBoardDown") == [],
            15,
            every=board3_quiet,
        )
        print(f"resolved {time.monotonic() - back:.1f}s after board1 was back")

        # board2 runs hot: within 5 °C of its passive trip point (85 °C), then cools.
        sysfs["board2"].set_temperature(83.0)
        wait_for(
            "NpudureBoardHot firing for board2",
            lambda: [a["labels"]["board"] for a in prom.alerts("NpudureBoardHot", "firing")] == ["board2"],
            HOT_FOR_S + 2 * SCRAPE_S + EVAL_S + SLACK_S,
        )
        sysfs["board2"].set_temperature(50.0)
        wait_for("NpudureBoardHot to resolve", lambda: prom.alerts("NpudureBoardHot") == [], 10)
