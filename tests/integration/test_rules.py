"""The alert rules pass promtool's checks and unit tests (moved from tests/unit: they run promtool)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import promtool
from helpers.monitoring_files import RULE_TESTS as TESTS
from helpers.monitoring_files import RULES


def test_promtool_check_rules() -> None:
    done = promtool.run("check", "rules", *RULES)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


@pytest.mark.parametrize("test_file", TESTS, ids=lambda p: p.name)
def test_promtool_test_rules(test_file: Path) -> None:
    done = promtool.run("test", "rules", test_file, timeout_s=120)
    assert done.returncode == 0, done.stdout + done.stderr
