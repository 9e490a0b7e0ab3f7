"""The rules in monitoring/rules/: valid for promtool, unit-tested by monitoring/tests/, and every
alert documented (summary, description, a runbook section that exists) and tested both ways."""

from __future__ import annotations

import re

import yaml
from helpers.cli import ROOT
from helpers.monitoring_files import RULE_TESTS as TESTS
from helpers.monitoring_files import RULES


def alerts() -> list[dict]:
    return [
        rule
        for path in RULES
        for group in yaml.safe_load(path.read_text())["groups"]
        for rule in group["rules"]
        if "alert" in rule
    ]


def test_the_issue_s_alerts_are_all_there() -> None:
    names = {rule["alert"] for rule in alerts()}
    assert {
        "NpudureBoardDown",
        "NpudureBoardNotServing",
        "NpudureContextRecoveries",
        "NpudureBoardHot",
        "NpudureBoardClockDiverging",
        "NpudureLatencyP99High",
        "NpudureErrorRate",
        "NpudureSchedulerDown",
        "NpudureCertificateExpiring",
        "NpudureAdminAuthFailures",
    } <= names


def test_every_alert_has_summary_description_severity_and_a_runbook_section() -> None:
    runbook = (ROOT / "docs" / "alerts.md").read_text()
    anchors = {
        re.sub(r"[^a-z0-9]", "", line[3:].lower()) for line in runbook.splitlines() if line.startswith("## ")
    }
    for rule in alerts():
        notes = rule["annotations"]
        assert notes.get("summary") and notes.get("description"), rule["alert"]
        assert rule["labels"]["severity"] in ("critical", "warning", "info"), rule["alert"]
        page, _, anchor = notes["runbook_url"].partition("#")
        assert page == "docs/alerts.md" and anchor == rule["alert"].lower(), rule["alert"]
        assert anchor in anchors, f"docs/alerts.md has no section ## {rule['alert']}"


def test_every_alert_is_tested_firing_and_quiet() -> None:
    """Each alert name appears in monitoring/tests/ at least once with expected alerts and once without."""
    firing: set[str] = set()
    quiet: set[str] = set()
    for path in TESTS:
        for case in yaml.safe_load(path.read_text())["tests"]:
            for check in case.get("alert_rule_test", []):
                (firing if check.get("exp_alerts") else quiet).add(check["alertname"])
    names = {rule["alert"] for rule in alerts()}
    assert names - firing == set(), "never tested firing"
    assert names - quiet == set(), "never tested quiet"
