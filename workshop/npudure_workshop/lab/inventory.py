"""The Ansible inventory for the lab (``inventory/lab/hosts.yml``)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from pathlib import Path

import yaml

from npudure_workshop import REPO
from npudure_workshop.lab.fakehw import PROC_ROOT, SYSFS_ROOT
from npudure_workshop.lab.network import Node

SSH_COMMON_ARGS = "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null"
HEADER = (
    "# Written by `npudure lab up`; removed by `npudure lab down`. Do not edit: it is rewritten.\n"
    "# The emulated fleet: boards are systemd-nspawn containers on this machine.\n"
)


def default_path() -> Path:
    """``inventory/lab/hosts.yml`` in the repository the package runs from, else in the current folder."""
    base = REPO if (REPO / "pyproject.toml").exists() else Path.cwd()
    return base / "inventory" / "lab" / "hosts.yml"


SYNTHETIC_DETECTIONS = 12
# Frigate's 200 ms x 25, the slowest time scale the lab picks (npudure_workshop.lab.timescale) with margin.
LAB_ZMQ_TIMEOUT_MS = 5000
# Short timings, so that the lab test of the alerts is quick: a board-down alert (for: 1m) fires within
# 1 min + 2 scrapes of 5 s.
SCRAPE_INTERVAL = "5s"
# The clock-divergence alert's for: (5m in the rules file), short enough for a lab test.
ALERT_FOR = {"NpudureBoardClockDiverging": "30s"}


def monitoring_vars(deb_dir: str) -> dict:
    return {
        "npudure_monitoring_deb_dir": deb_dir,
        "npudure_monitoring_scrape_interval": SCRAPE_INTERVAL,
        "npudure_monitoring_scrape_timeout": "4s",
        "npudure_monitoring_evaluation_interval": SCRAPE_INTERVAL,
        "npudure_monitoring_retention_size": "256MB",
        "npudure_monitoring_alert_for": dict(ALERT_FOR),
    }


def render(
    nodes: Sequence[Node],
    key_path: Path,
    backend: str = "sim",
    # The fake NPU IRQ tree itself, not /proc: the boards also see it bind-mounted on /proc/irq, but under
    # nspawn's read-only /proc/irq, and a sandboxed unit (ProtectControlGroups=) sees the real one on top.
    irq_proc_root: str = PROC_ROOT,
    sysfs_root: str = SYSFS_ROOT,
    arm64: Collection[str] = (),
    sim_time_scale: float = 1.0,
    monitoring_deb_dir: str | None = None,
) -> dict:
    boards: dict[str, dict] = {n.name: {"ansible_host": n.address} for n in nodes if n.role == "board"}
    for name in arm64:  # an arm64 Debian board under qemu-user: slower, so longer timeouts are fair
        boards[name]["npudure_lab_arch"] = "arm64"
    scheds = {n.name: {"ansible_host": n.address} for n in nodes if n.role == "scheduler"}
    children: dict = {"boards": {"hosts": boards}}
    if scheds:
        children["scheduler"] = {"hosts": scheds}
        if monitoring_deb_dir:  # Prometheus on the scheduler host, from the controller's .deb files
            children["monitoring"] = {
                "hosts": {name: {} for name in scheds},
                "vars": monitoring_vars(monitoring_deb_dir),
            }
    return {
        "all": {
            "vars": {
                "ansible_user": "root",
                "ansible_ssh_private_key_file": str(Path(key_path).resolve()),
                "ansible_ssh_common_args": SSH_COMMON_ARGS,
                "ansible_python_interpreter": "/usr/bin/python3",
                "npudure_lab": True,
                "npudure_backend": backend,
                # The emulated NPU's pace, picked for this host (lab.timescale); -e overrides.
                "npudure_agent_sim_time_scale": sim_time_scale,
                # Frigate's zmq deadline (200 ms) in the emulated boards' time: a board 10x slowed takes
                # ~260 ms a frame, which a 200 ms deadline would rightly refuse. Fixed, not derived from
                # the time scale: every playbook run must render the scheduler config the same, or a
                # run without the -e time scale would change it and hand the scheduler over.
                "npudure_scheduler_zmq_request_timeout_ms": LAB_ZMQ_TIMEOUT_MS,
                # sim: SYNTHETIC boxes seeded by each frame, so the HTTP API's boxes can be checked.
                "npudure_agent_sim_synthetic_detections": SYNTHETIC_DETECTIONS,
                "npudure_agent_sysfs_root": sysfs_root,
                "npudure_irq_proc_root": irq_proc_root,
            },
            "children": children,
        }
    }


def to_yaml(inventory: dict) -> str:
    return HEADER + yaml.safe_dump(inventory, sort_keys=False, default_flow_style=False)


def write(path: Path, inventory: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(to_yaml(inventory))
    tmp.replace(path)
