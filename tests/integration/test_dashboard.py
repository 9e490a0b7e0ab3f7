"""Every query of the fleet dashboard passes promtool (moved from tests/unit: it runs promtool)."""

from __future__ import annotations

import yaml
from helpers import promtool
from helpers.monitoring_files import dashboard_queries as queries


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
