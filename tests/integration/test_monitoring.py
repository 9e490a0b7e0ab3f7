"""The alert rules against real services: three agents and a scheduler on loopback, scraped by a real
Prometheus whose configuration the npudure_monitoring role's template rendered (real Ansible).

A killed agent raises NpudureBoardDown within the rule's ``for:`` plus two scrape intervals (and one
rule evaluation, the only moment an alert changes state), and it resolves after the agent is back; a
board an operator drained first raises none. A board whose (fake) sysfs reads 83 °C, within 5 °C of its
85 °C passive trip point, raises NpudureBoardHot. Short intervals keep it bounded (< 90 s).
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from helpers import promtool
from helpers.fake_board_sysfs import FakeBoardSysfs
from helpers.loadgen import frame_bytes, run_closed_loop
from helpers.mtls_cluster import as_client, tls_section
from helpers.prometheus_server import Prometheus, copy_rules, render_config

from npudure.proto import inference_pb2 as pb
from npudure.proto import inference_pb2_grpc as rpc
from npudure.security import access as security
from npudure.security import pki
from npudure_workshop.lab.local import LocalCluster, free_port

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


def hold(seconds: float, check: Callable[[], None]) -> None:
    """Run the assertion ``check`` at every poll for ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        check()
        time.sleep(0.2)
    check()


def drain(address: str, board: str) -> None:
    with security.channel(address) as channel:
        rpc.ClusterStub(channel).DrainNode(pb.DrainNodeRequest(node=board, drain=True), timeout=5)


@dataclass
class Monitored:
    cluster: LocalCluster
    prom: Prometheus
    sysfs: dict[str, FakeBoardSysfs]
    ports: dict[str, int]  # metrics port by board, and "scheduler"


@contextlib.contextmanager
def monitored(
    tmp_path: Path, alert_for: dict[str, str], cpufreq: bool = True, agent: dict | None = None
) -> Iterator[Monitored]:
    """Three agents (fake sysfs each; ``agent``: more of their config) and a scheduler, scraped by a
    Prometheus the role's template configured, every service up before the test starts."""
    sysfs = {name: FakeBoardSysfs(tmp_path / f"sysfs-{name}", cpufreq) for name in BOARDS}
    ports = {name: free_port() for name in (*BOARDS, "scheduler")}
    prometheus_port = free_port()
    rules = copy_rules(tmp_path / "rules", alert_for)
    settings = {
        "npudure_monitoring_scrape_interval": f"{SCRAPE_S:.0f}s",
        "npudure_monitoring_scrape_timeout": "900ms",
        "npudure_monitoring_evaluation_interval": f"{EVAL_S:.0f}s",
        "npudure_monitoring_rules_dir": str(rules),
        "npudure_monitoring_port": prometheus_port,
    }
    agent_ports = {name: ports[name] for name in BOARDS}
    # Ansible renders the configuration while the cluster starts (both mostly wait on subprocesses).
    with ThreadPoolExecutor(max_workers=1) as pool:
        rendering = pool.submit(render_config, tmp_path, agent_ports, ports["scheduler"], settings)
        overrides = {
            name: {
                "metrics_port": ports[name],
                "affinity": {"sysfs_root": str(sysfs[name].root)},
                **(agent or {}),
            }
            for name in BOARDS
        }
        cluster = LocalCluster(
            boards=3,
            per_board_overrides=overrides,
            scheduler_overrides={"metrics_port": ports["scheduler"]},
            workdir=tmp_path / "cluster",
        )
        with cluster, Prometheus(rendering.result(), tmp_path, port=prometheus_port) as prom:

            def all_up() -> bool:
                targets = prom.targets()
                return len(targets) == 5 and all(t["health"] == "up" for t in targets)

            wait_for("all five targets up", all_up, 30)
            yield Monitored(cluster, prom, sysfs, ports)


def test_board_down_fires_and_resolves_and_a_drained_board_stays_quiet(tmp_path: Path) -> None:
    alert_for = {"NpudureBoardDown": f"{DOWN_FOR_S:.0f}s", "NpudureBoardHot": f"{HOT_FOR_S:.0f}s"}
    with monitored(tmp_path, alert_for) as fleet:
        cluster, prom, sysfs = fleet.cluster, fleet.prom, fleet.sysfs
        # Every service is a target, with its board label.
        labels = {(t["labels"]["job"], t["labels"].get("board")) for t in prom.targets()}
        assert labels == {
            *(("npudure_agent", name) for name in BOARDS),
            ("npudure_scheduler", None),
            ("prometheus", None),
        }

        # What they export passes promtool's linter, board telemetry included.
        texts = {}
        for name, port in fleet.ports.items():
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
        hold(DOWN_FOR_S, board3_quiet)

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


def test_a_board_whose_clock_falls_under_load_raises_clock_divergence(tmp_path: Path) -> None:
    """Emulated boards (no cpufreq in their sysfs, as on the lab): the scheduler caps board3's CPU at
    600 MHz while a closed loop keeps every board serving; its modelled clock falls below 85 % of the
    loaded boards' median and NpudureBoardClockDiverging fires for board3 alone."""
    with monitored(tmp_path, {"NpudureBoardClockDiverging": "5s"}, cpufreq=False) as fleet:
        prom = fleet.prom
        load = ThreadPoolExecutor(max_workers=1)
        running = load.submit(run_closed_loop, fleet.cluster.address, 6, 45.0)
        try:
            wait_for(
                "three loaded boards in the fleet median",
                lambda: (
                    [
                        r["value"][1]
                        for r in prom.query('npudure:fleet_clock_boards:count_loaded{clock="cpu"}')
                    ]
                    == ["3"]
                ),
                20,
            )
            with security.channel(fleet.cluster.address) as channel:
                rpc.ClusterStub(channel).SetNodeCpuCap(
                    pb.SetNodeCpuCapRequest(node="board3", mhz=600), timeout=5
                )
            capped = time.monotonic()
            wait_for(
                "NpudureBoardClockDiverging firing for board3",
                lambda: (
                    [a["labels"]["board"] for a in prom.alerts("NpudureBoardClockDiverging", "firing")]
                    == ["board3"]
                ),
                35,
            )
            alert = prom.alerts("NpudureBoardClockDiverging", "firing")[0]
            assert alert["labels"]["clock"] == "cpu"
            print(
                f"\nNpudureBoardClockDiverging fired {time.monotonic() - capped:.1f}s after the cap (for 5s)"
            )
        finally:
            result = running.result(timeout=90)
            load.shutdown()
        assert result.latencies_s, "the load got no answers"


def test_with_mutual_tls_prometheus_scrapes_with_its_own_fleet_certificate(tmp_path: Path) -> None:
    """The role's TLS scrape configuration against services that require mutual TLS: Prometheus'
    certificate from the fleet CA (what npudure_tls gives it) gets every target up over https, the
    agents checked against the fleet name; and the services report when their certificates expire."""
    ca = tmp_path / "ca"
    pki.make_ca(ca)
    agent = pki.issue(ca, "board", ["127.0.0.1", security.AGENT_FLEET_NAME], tmp_path / "agent")
    scheduler = pki.issue(ca, "npudure-scheduler", ["127.0.0.1"], tmp_path / "scheduler")
    admin = pki.issue(ca, "npudure-admin", [], tmp_path / "admin", usage="client")
    tls_dir = tmp_path / "prometheus-tls"  # the layout npudure_tls makes on the monitoring host
    pki.issue(ca, "npudure-prometheus", [], tls_dir, key_name="prometheus", usage="client")
    shutil.copy(agent.ca, tls_dir / "ca.crt")
    ports = {name: free_port() for name in ("board1", "board2", "scheduler")}
    prometheus_port = free_port()
    settings = {
        "npudure_monitoring_scrape_interval": "1s",
        "npudure_monitoring_scrape_timeout": "900ms",
        "npudure_monitoring_tls_enabled": True,
        "npudure_monitoring_tls_dir": str(tls_dir),
        "npudure_monitoring_rules_dir": str(copy_rules(tmp_path / "rules", {})),
        "npudure_monitoring_port": prometheus_port,
    }
    boards = ("board1", "board2")
    config = render_config(tmp_path, {b: ports[b] for b in boards}, ports["scheduler"], settings)
    with pytest.MonkeyPatch.context() as mp:
        as_client(mp, admin)  # the cluster's start-up health checks speak mutual TLS too
        cluster = LocalCluster(
            boards=2,
            agent_overrides={"tls": tls_section(agent)},
            per_board_overrides={b: {"metrics_port": ports[b]} for b in boards},
            scheduler_overrides={"tls": tls_section(scheduler), "metrics_port": ports["scheduler"]},
            workdir=tmp_path / "cluster",
        )
        with cluster, Prometheus(config, tmp_path, port=prometheus_port) as prom:

            def all_up() -> bool:
                targets = [t for t in prom.targets() if t["labels"]["job"] != "prometheus"]
                return len(targets) == 3 and all(t["health"] == "up" for t in targets)

            wait_for("every service scraped over mutual TLS", all_up, 30)
            services = [t for t in prom.targets() if t["labels"]["job"] != "prometheus"]
            assert {t["scrapeUrl"].split(":")[0] for t in services} == {"https"}
            series = 'npudure_tls_certificate_expiry_timestamp_seconds{file="cert", board="board1"}'
            expiry = prom.query(series)
            assert [float(r["value"][1]) for r in expiry] == [
                pki.load_certificate(agent.cert).not_valid_after_utc.timestamp()
            ]


def test_a_hung_npu_context_is_not_serving_not_down(tmp_path: Path) -> None:
    """board2's NPU context hangs: the scheduler takes it out (DOWN), and the alert says why —
    NpudureBoardNotServing{reason="hung_npu_context"} fires, NpudureBoardDown does not, though the
    hang lasts longer than its for:. Both stay quiet after the context returns."""
    alert_for = {"NpudureBoardNotServing": "3s", "NpudureBoardDown": "10s"}
    with monitored(tmp_path, alert_for, agent={"hang_timeout_s": 1.0}) as fleet:
        prom, board2 = fleet.prom, fleet.cluster.agents["board2"].address

        def not_down() -> None:
            boards = [a["labels"]["board"] for a in prom.alerts("NpudureBoardDown", "firing")]
            assert "board2" not in boards, "a hung board raised NpudureBoardDown"

        with security.channel(board2) as channel:
            rpc.NodeStub(channel).InjectFault(pb.InjectFaultRequest(fault=pb.FAULT_HANG), timeout=5)
            request = pb.InferRequest(encoding=pb.ENCODING_RAW_RGB, frame=frame_bytes())
            with pytest.raises(grpc.RpcError):  # the frame never comes back: the worker hangs
                rpc.InferenceStub(channel).Infer(request, timeout=2)
        hung = time.monotonic()
        wait_for(
            "NpudureBoardNotServing (hung) firing for board2",
            lambda: (
                [
                    (a["labels"]["board"], a["labels"]["reason"])
                    for a in prom.alerts("NpudureBoardNotServing", "firing")
                ]
                == [("board2", "hung_npu_context")]
            ),
            20,
            every=not_down,
        )
        # Hung for longer than NpudureBoardDown's for: (10 s), and still only "not serving".
        hold(max(0.0, 14 - (time.monotonic() - hung)), not_down)
        with security.channel(board2) as channel:
            rpc.NodeStub(channel).InjectFault(pb.InjectFaultRequest(fault=pb.FAULT_NONE), timeout=5)
        wait_for(
            "NpudureBoardNotServing to resolve",
            lambda: prom.alerts("NpudureBoardNotServing") == [],
            30,
            every=not_down,
        )
        hold(12, not_down)  # the scheduler takes it back after its recovery checks: still no board-down
