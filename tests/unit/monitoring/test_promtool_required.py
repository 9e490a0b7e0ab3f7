"""Without promtool the rule tests fail as root or in CI (bootstrap installs it) and skip elsewhere."""

from __future__ import annotations

import pytest
from helpers import promtool


@pytest.fixture
def no_promtool(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.setattr(promtool.shutil, "which", lambda tool: None)
    monkeypatch.delenv("CI", raising=False)
    return monkeypatch


def test_missing_promtool_fails_as_root(no_promtool: pytest.MonkeyPatch) -> None:
    no_promtool.setattr(promtool.os, "geteuid", lambda: 0)
    with pytest.raises(pytest.fail.Exception, match="apt-get install prometheus"):
        promtool.require()


def test_missing_promtool_fails_in_ci(no_promtool: pytest.MonkeyPatch) -> None:
    no_promtool.setattr(promtool.os, "geteuid", lambda: 1000)
    no_promtool.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception):
        promtool.require()


def test_missing_promtool_skips_for_a_developer(no_promtool: pytest.MonkeyPatch) -> None:
    no_promtool.setattr(promtool.os, "geteuid", lambda: 1000)
    with pytest.raises(pytest.skip.Exception):
        promtool.require()
