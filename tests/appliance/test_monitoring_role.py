"""The npudure_monitoring role's templates, rendered by real Ansible without a lab: the scrape
configuration of an inventory (plain and with mutual TLS) passes promtool, retention is sized from the
host's free disk, and Alertmanager's configuration has its webhook receiver."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml
from helpers import ansible, promtool
from helpers.ansible import BIN

pytestmark = pytest.mark.skipif(
    not (BIN / "ansible-playbook").exists(), reason="ansible-core is not installed (pip install -e '.[dev]')"
)
GIB = 1024**3


def render(tmp_path: Path, extra: dict, mounts: list[dict] | None = None) -> Path:
    """Render every template of the role for the host 'sched' of a three-board inventory."""
    inventory = {
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
        "children": {
            "boards": {
                "hosts": {
                    "board1": {"ansible_host": "10.0.0.11"},
                    "board2": {"ansible_host": "10.0.0.12", "npudure_agent_metrics_port": 50191},
                    "board3": {"ansible_host": "10.0.0.13", "npudure_agent_node_name": "bench-3"},
                }
            },
            "scheduler": {"hosts": {"sched": {"ansible_host": "10.0.0.10"}}},
        },
    }
    # The mounts: what the facts (gather_subset mounts) would have found on the host.
    return ansible.render(
        tmp_path,
        "npudure_monitoring",
        "scheduler",
        ["prometheus.yml.j2", "prometheus.default.j2", "alertmanager.yml.j2", "alertmanager.default.j2"],
        {**extra, "_npudure_monitoring_mounts": mounts or []},
        inventory=inventory,
        per_host=False,
    )


def test_scrape_config_from_the_inventory_with_mutual_tls(tmp_path: Path) -> None:
    root_fs = {"mount": "/", "size_available": 40 * GIB}
    var_fs = {"mount": "/var/lib", "size_available": 8 * GIB}
    out = render(tmp_path, {"npudure_tls_enabled": True}, [root_fs, var_fs])
    checked = promtool.run("check", "config", "--syntax-only", out / "prometheus.yml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    config = yaml.safe_load((out / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    agents = jobs["npudure_agent"]
    assert [(c["targets"], c["labels"]["board"]) for c in agents["static_configs"]] == [
        (["10.0.0.11:50091"], "board1"),
        (["10.0.0.12:50191"], "board2"),
        (["10.0.0.13:50091"], "bench-3"),
    ]
    assert agents["scheme"] == "https" and jobs["npudure_scheduler"]["scheme"] == "https"
    assert agents["tls_config"] == {
        "ca_file": "/etc/prometheus/npudure-tls/ca.crt",
        "cert_file": "/etc/prometheus/npudure-tls/prometheus.crt",
        "key_file": "/etc/prometheus/npudure-tls/prometheus.key",
        "server_name": "npudure-agents",
    }
    assert jobs["npudure_scheduler"]["static_configs"] == [{"targets": ["10.0.0.10:50090"]}]
    assert config["rule_files"] == ["/etc/prometheus/npudure-rules/*.yml"]
    assert "alerting" not in config
    # 25 % of the 8 GiB free on /var/lib, the filesystem that holds /var/lib/prometheus/metrics2.
    args = (out / "prometheus.default").read_text()
    assert "--storage.tsdb.retention.size=2048MB" in args and "--storage.tsdb.retention.time=30d" in args
    # On an mTLS fleet the monitoring plane (plain HTTP, no auth) listens on loopback only.
    assert "--web.listen-address=127.0.0.1:9090" in args
    assert (
        "--web.listen-address=127.0.0.1:9093 --cluster.listen-address="
        in (out / "alertmanager.default").read_text()
    )


def test_plain_http_explicit_retention_and_alertmanager(tmp_path: Path) -> None:
    out = render(
        tmp_path,
        {
            "npudure_monitoring_retention_size": "6GB",
            "npudure_monitoring_alertmanager_enabled": True,
            "npudure_monitoring_alertmanager_webhook_url": "http://10.0.0.5:5001/hook",
        },
    )
    checked = promtool.run("check", "config", "--syntax-only", out / "prometheus.yml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    config = yaml.safe_load((out / "prometheus.yml").read_text())
    assert {job["scheme"] for job in config["scrape_configs"] if job["job_name"].startswith("npudure")} == {
        "http"
    }
    assert all("tls_config" not in job for job in config["scrape_configs"])
    assert config["alerting"]["alertmanagers"] == [{"static_configs": [{"targets": ["127.0.0.1:9093"]}]}]
    assert "--storage.tsdb.retention.size=6GB" in (out / "prometheus.default").read_text()
    assert "--web.listen-address=0.0.0.0:9090" in (out / "prometheus.default").read_text()
    alertmanager = yaml.safe_load((out / "alertmanager.yml").read_text())
    assert alertmanager["receivers"] == [
        {
            "name": "npudure-webhook",
            "webhook_configs": [{"url": "http://10.0.0.5:5001/hook", "send_resolved": True}],
        }
    ]


def test_no_facts_gives_the_minimum_retention(tmp_path: Path) -> None:
    out = render(tmp_path, {})
    assert "--storage.tsdb.retention.size=512MB" in (out / "prometheus.default").read_text()
