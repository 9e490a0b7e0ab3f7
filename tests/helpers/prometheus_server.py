"""A real Prometheus on loopback for the integration tests, configured by the npudure_monitoring role.

The scrape configuration is the role's own template rendered by real Ansible from an inventory of the
test's processes (so the test also proves the template), and the rules are the repository's, with
the ``for:`` of chosen alerts shortened so a test stays bounded. Prometheus is a child process of the
test, stopped by its PID.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from helpers import ansible, promtool
from npudure_workshop.lab.local import free_port

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "monitoring" / "rules"


def copy_rules(dest: Path, alert_for: dict[str, str]) -> Path:
    """The repository's rule files in ``dest``, with ``for:`` replaced for the alerts named."""
    dest.mkdir(parents=True, exist_ok=True)
    for path in RULES.glob("*.yml"):
        data = yaml.safe_load(path.read_text())
        for group in data["groups"]:
            for rule in group["rules"]:
                if rule.get("alert") in alert_for:
                    rule["for"] = alert_for[rule["alert"]]
        (dest / path.name).write_text(yaml.safe_dump(data, sort_keys=False))
    return dest


def render_config(workdir: Path, agents: dict[str, int], scheduler_port: int, extra: dict) -> Path:
    """prometheus.yml from the role's template, for agents {board: metrics port} and the scheduler."""
    inventory = {
        "vars": {
            "ansible_connection": "local",
            "ansible_host": "127.0.0.1",
            "ansible_python_interpreter": sys.executable,
        },
        "children": {
            "boards": {
                "hosts": {name: {"npudure_agent_metrics_port": port} for name, port in agents.items()}
            },
            "scheduler": {"hosts": {"sched": {"npudure_scheduler_metrics_port": scheduler_port}}},
        },
    }
    out = ansible.render(
        workdir,
        "npudure_monitoring",
        "scheduler",
        ["prometheus.yml.j2"],
        extra,
        inventory=inventory,
        per_host=False,
    )
    return out / "prometheus.yml"


@dataclass
class Prometheus:
    config: Path
    workdir: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 60) -> Prometheus:
        binary = promtool.require("prometheus")
        checked = promtool.run("check", "config", self.config)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        log = (self.workdir / "prometheus.log").open("wb")
        self.process = subprocess.Popen(
            [
                binary,
                f"--config.file={self.config}",
                f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--web.enable-lifecycle",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"prometheus exited: {self.log()[-2000:]}")
            ready_url = f"{self.url}/-/ready"
            with contextlib.suppress(OSError), urllib.request.urlopen(ready_url, timeout=2) as ready:
                if ready.status == 200:
                    return self
            time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"prometheus not ready within {timeout_s:.0f}s: {self.log()[-2000:]}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)

    def log(self) -> str:
        path = self.workdir / "prometheus.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def api(self, path: str, **params: str) -> object:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=5) as reply:
            body = json.loads(reply.read())
        assert body["status"] == "success", body
        return body["data"]

    def targets(self) -> list[dict]:
        return self.api("targets", state="active")["activeTargets"]

    def alerts(self, name: str, state: str | None = None) -> list[dict]:
        """Active alerts (pending and firing) of that name, or only those in ``state``."""
        return [
            a
            for a in self.api("alerts")["alerts"]
            if a["labels"]["alertname"] == name and (state is None or a["state"] == state)
        ]

    def query(self, expr: str) -> list[dict]:
        return self.api("query", query=expr)["result"]

    def __enter__(self) -> Prometheus:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
