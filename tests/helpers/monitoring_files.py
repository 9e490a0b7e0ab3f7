"""The monitoring files the tests read (the rules, their promtool tests, the fleet dashboard), and the
dashboard's queries as promtool sees them: for the static checks in tests/unit/monitoring and the
promtool runs in tests/integration."""

from __future__ import annotations

import json

from helpers.cli import ROOT

RULES = sorted((ROOT / "monitoring" / "rules").glob("*.yml"))
RULE_TESTS = sorted((ROOT / "monitoring" / "tests").glob("*.test.yml"))
DASHBOARD = ROOT / "monitoring" / "dashboards" / "npudure-fleet.json"
# Grafana's variables, replaced by what they expand to, so promtool sees plain PromQL.
VARIABLES = {"$__rate_interval": "1m", "$__interval": "1m", "${board}": ".*", "$board": ".*"}


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title [refId], PromQL) of every panel target."""
    dashboard = json.loads(DASHBOARD.read_text())
    found = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for name, value in VARIABLES.items():
                expr = expr.replace(name, value)
            found.append((f"{panel['title']} [{target['refId']}]", expr))
    return found
