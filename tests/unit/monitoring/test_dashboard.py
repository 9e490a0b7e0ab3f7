"""The Grafana dashboard: every panel's query is valid PromQL (compiled into a rules file for promtool)
and names only series the services export or the recording rules make."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from helpers import promtool

ROOT = Path(__file__).resolve().parents[3]
DASHBOARD = ROOT / "monitoring" / "dashboards" / "npudure-fleet.json"
# Grafana's variables, replaced by what they expand to, so promtool sees plain PromQL.
VARIABLES = {"$__rate_interval": "1m", "$__interval": "1m", "${board}": ".*", "$board": ".*"}


def queries() -> list[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    found = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for name, value in VARIABLES.items():
                expr = expr.replace(name, value)
            found.append((f"{panel['title']} [{target['refId']}]", expr))
    return found


def test_the_fleet_overview_has_the_issue_s_panels() -> None:
    text = " ".join(expr for _, expr in queries())
    for series in (
        "npudure:board_inferences:rate1m",
        "npudure:board_latency_seconds:p99",
        "npudure:board_temperature_celsius:max",
        "npudure_board_cpu_frequency_hertz",
        "npudure_board_npu_frequency_hertz",
        "npudure:board_in_flight",
        "npudure_scheduler_board_state",
    ):
        assert series in text, series


def test_every_panel_query_passes_promtool(tmp_path) -> None:
    found = queries()
    assert len(found) >= 10
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"dashboard:query_{i}", "expr": expr} for i, (_, expr) in enumerate(found)
                ],
            }
        ]
    }
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump(rules, sort_keys=False))
    done = promtool.run("check", "rules", path)
    assert done.returncode == 0, done.stdout + done.stderr + "\n" + "\n".join(f"{t}: {e}" for t, e in found)


def test_every_series_a_panel_names_exists() -> None:
    recorded = {
        rule["record"]
        for path in (ROOT / "monitoring" / "rules").glob("*.yml")
        for group in yaml.safe_load(path.read_text())["groups"]
        for rule in group["rules"]
        if "record" in rule
    }
    documented = set(re.findall(r"`(npudure_[a-z0-9_]+)`", (ROOT / "docs" / "metrics.md").read_text()))
    for title, expr in queries():
        for name in re.findall(
            r"\bnpudure[:_][a-z0-9_:]+", re.sub(r'"[^"]*"', '""', expr)
        ):  # not label values
            assert name in recorded or name in documented, (
                f"{title}: {name} is neither recorded nor documented"
            )
