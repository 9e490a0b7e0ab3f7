"""The Grafana dashboard: every panel's query is valid PromQL (compiled into a rules file for promtool)
and names only series the services export or the recording rules make."""

from __future__ import annotations

import re

import yaml
from helpers.cli import ROOT
from helpers.monitoring_files import dashboard_queries


def queries() -> list[tuple[str, str]]:
    return dashboard_queries()


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
