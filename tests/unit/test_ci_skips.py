"""The conftest hook that turns a lab test's skip into a failure when the machine could run it."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.lab_skips import skip_is_a_failure


@pytest.fixture
def as_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")


@pytest.mark.parametrize(
    "reason",
    [
        "another lab is up without inventory/lab/hosts.yml (npudure-br0 exists)",
        "npudure lab: boards already exist",
        "the lab did not boot within 90 s",
    ],
)
def test_a_skip_for_a_lab_that_is_in_the_way_fails_in_ci(as_ci, reason: str) -> None:
    assert skip_is_a_failure(True, reason)


@pytest.mark.parametrize(
    "reason",
    ["needs root (mounts, network namespaces, cgroups): run with sudo", "missing Debian packages: apt-get x"],
)
def test_a_machine_that_cannot_still_skips(as_ci, reason: str) -> None:
    assert not skip_is_a_failure(True, reason)


def test_other_tests_and_non_ci_runs_keep_their_skips(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    assert not skip_is_a_failure(False, "nginx is not installed")
    monkeypatch.delenv("CI")
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    assert not skip_is_a_failure(True, "another lab is up")


def test_every_appliance_module_that_boots_a_lab_is_marked_lab() -> None:
    # The hook goes by the marker: a lab module without it would skip silently in CI.
    appliance = Path(__file__).parents[1] / "appliance"
    for module in appliance.glob("test_*.py"):
        text = module.read_text()
        if "lab.up(" in text or '"lab", "up"' in text or "ensure_lab(" in text or "fleet: Path" in text:
            assert "pytest.mark.lab" in text, f"{module.name} boots or uses a lab but is not marked lab"


def test_the_hook_turns_the_skip_into_a_failure(pytester: pytest.Pytester, monkeypatch) -> None:
    monkeypatch.setenv("CI", "true")
    # The sandbox has its own rootdir, so not our pythonpath setting: the copied conftest imports helpers.
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1]))
    pytester.makeconftest((Path(__file__).parents[1] / "conftest.py").read_text())
    pytester.makepyfile(
        test_example="""
import pytest
pytestmark = pytest.mark.lab
def test_in_the_way():
    pytest.skip("another lab is up (npudure-br0 exists)")
def test_cannot():
    pytest.skip("needs root: run with sudo")
"""
    )
    # In-process: a unit test starts no Python.
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "-o", "asyncio_default_fixture_loop_scope=function"
    )
    result.assert_outcomes(failed=1, skipped=1)
