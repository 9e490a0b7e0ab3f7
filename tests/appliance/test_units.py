"""systemd integration: the units as Ansible renders them score <= 2.0 in `systemd-analyze security`,
say Type=notify with a watchdog and stop restarting on a configuration error; the services send READY=1
and watchdog pings, and log with journald priorities."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import ansible
from helpers.ansible import BIN, ROOT

from npudure_workshop.lab.local import LocalCluster, free_port

UNITS = {
    # role, group, template, extra vars: the most demanding settings (real NPU, cpufreq control).
    "agent": ("npudure_agent", "boards", "npudure-agent.service.j2", {"npudure_backend": "rknn"}),
    "scheduler": ("npudure_scheduler", "scheduler", "npudure-scheduler.service.j2", {}),
    "irq": ("npudure_irq_affinity", "boards", "npudure-irq-affinity.service.j2", {}),
}
MAX_EXPOSURE = 2.0
WEDGE = ROOT / "tests" / "helpers" / "wedge_loop.py"
ANALYZE = shutil.which("systemd-analyze")


def render(tmp_path: Path, which: str) -> Path:
    if not (BIN / "ansible-playbook").exists():
        pytest.skip("ansible-playbook is not installed in this virtualenv")
    role, group, template, extra = UNITS[which]
    out = ansible.render(tmp_path, role, group, [template], extra)
    host = "sched" if group == "scheduler" else "board1"
    rendered = out / f"{host}-{template.removesuffix('.j2')}"
    unit = tmp_path / template.removesuffix(".j2")
    unit.write_text(rendered.read_text())
    return unit


def exposure(unit: Path) -> float:
    done = subprocess.run(
        [ANALYZE, "security", "--offline=true", "--no-pager", str(unit)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    found = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", done.stdout + done.stderr)
    assert found, done.stdout + done.stderr
    return float(found.group(1))


@pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze is not installed")
@pytest.mark.parametrize("which", ["agent", "scheduler", "irq"])
def test_every_unit_scores_at_most_2(tmp_path: Path, which: str) -> None:
    unit = render(tmp_path, which)
    score = exposure(unit)
    assert score <= MAX_EXPOSURE, f"{which}: exposure {score} > {MAX_EXPOSURE}\n{unit.read_text()}"


@pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze is not installed")
def test_the_score_check_can_fail(tmp_path: Path) -> None:
    bare = tmp_path / "bare.service"
    bare.write_text("[Service]\nExecStart=/bin/true\n")
    assert exposure(bare) > MAX_EXPOSURE


@pytest.mark.parametrize("which", ["agent", "scheduler"])
def test_services_are_notify_with_a_watchdog_and_no_restart_on_config_errors(tmp_path: Path, which) -> None:
    lines = render(tmp_path, which).read_text().splitlines()
    # The scheduler's handover successor sends MAINPID=/READY=1 itself: NotifyAccess=all there.
    access = "NotifyAccess=all" if which == "scheduler" else "NotifyAccess=main"
    for line in ("Type=notify", access, "RestartPreventExitStatus=78"):
        assert line in lines, f"{line} missing"
    assert any(re.fullmatch(r"WatchdogSec=\d+s?", line) for line in lines)


def test_the_agent_says_ready_and_pings_the_watchdog(tmp_path: Path) -> None:
    sock_path = tmp_path / "notify"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(sock_path))
        sock.settimeout(60)
        config = tmp_path / "agent.yml"
        config.write_text(f"node_name: b1\nlisten: 127.0.0.1:{free_port()}\nmetrics_port: 0\n")
        env = {**os.environ, "NOTIFY_SOCKET": str(sock_path), "WATCHDOG_USEC": "200000"}
        env.pop("WATCHDOG_PID", None)
        agent = subprocess.Popen(
            [sys.executable, "-m", "npudure", "agent", "--config", str(config)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            messages = [sock.recv(4096).decode() for _ in range(4)]
        finally:
            agent.terminate()
            agent.wait(timeout=20)
    assert messages[0].startswith("READY=1"), messages
    assert messages[1:] == ["WATCHDOG=1"] * 3, messages


def test_a_wedged_event_loop_stops_the_watchdog_pings(tmp_path: Path) -> None:
    # The pings come from the event loop, not a thread: once a blocking call wedges the loop they stop
    # while the process lives on, so systemd's WatchdogSec= fires (on real systemd: test_site.py).
    sock_path = tmp_path / "notify"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(sock_path))
        config = tmp_path / "agent.yml"
        config.write_text(f"node_name: b1\nlisten: 127.0.0.1:{free_port()}\nmetrics_port: 0\n")
        env = {**os.environ, "NOTIFY_SOCKET": str(sock_path), "WATCHDOG_USEC": "200000"}
        env.pop("WATCHDOG_PID", None)
        agent = subprocess.Popen(
            [sys.executable, str(WEDGE), "2", "agent", "--config", str(config)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            sock.settimeout(60)
            assert sock.recv(4096).decode().startswith("READY=1")
            ready = time.monotonic()
            pings = []  # seconds after READY=1; the loop is wedged ~2 s after it started
            sock.settimeout(0.5)
            while time.monotonic() - ready < 6.0:
                try:
                    if sock.recv(4096).decode() == "WATCHDOG=1":
                        pings.append(time.monotonic() - ready)
                except TimeoutError:
                    pass
            assert agent.poll() is None, "the agent exited instead of wedging"
        finally:
            agent.kill()
            agent.wait(timeout=20)
    assert len(pings) >= 3, f"only {len(pings)} watchdog pings before the wedge"
    # Every 0.1 s while the loop runs; none for the last seconds, though the process is alive.
    assert pings[-1] < 4.0, f"pings went on after the loop was wedged: last at {pings[-1]:.1f} s"


def test_log_lines_carry_journald_priorities_under_systemd(tmp_path: Path) -> None:
    # A scheduler whose only board is absent logs an ERROR, then exits 1 (not a configuration error).
    config = tmp_path / "scheduler.yml"
    config.write_text(
        f"listen: 127.0.0.1:{free_port()}\nmetrics_port: 0\nstartup_wait_s: 1\n"
        f"boards:\n  - name: ghost\n    address: 127.0.0.1:{free_port()}\n"
    )
    env = {**os.environ, "JOURNAL_STREAM": "8:12345", "NPUDURE_NO_REEXEC": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "npudure", "scheduler", "--config", str(config)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr
    assert re.search(r"^<3>ERROR npudure\.scheduler\.server: board ghost", done.stderr, re.M), done.stderr


def test_config_errors_exit_78(tmp_path: Path) -> None:
    bad = tmp_path / "agent.yml"
    bad.write_text("node_name: b1\nqueue_limit: -3\n")
    done = subprocess.run(
        [sys.executable, "-m", "npudure", "agent", "--config", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 78, done.stderr
    assert "queue_limit" in done.stderr


def test_local_cluster_servers_ignore_a_missing_notify_socket() -> None:
    # Outside systemd every notify call is a no-op: a LocalCluster serves as before.
    with LocalCluster(boards=1, time_scale=5.0) as cl:
        assert cl.scheduler is not None and cl.scheduler.process.poll() is None
