"""The conftest hook that turns a lab test's skip into a failure when the machine could run it."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import skip_is_a_failure

LAB = "tests/test_appliance.py"


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
    for path in (LAB, "tests/test_lab_fleet.py", "tests/test_faults_fleet.py", "tests/test_appliance_tls.py"):
        assert skip_is_a_failure(path, reason)


@pytest.mark.parametrize(
    "reason",
    ["needs root (mounts, network namespaces, cgroups): run with sudo", "missing Debian packages: apt-get x"],
)
def test_a_machine_that_cannot_still_skips(as_ci, reason: str) -> None:
    assert not skip_is_a_failure(LAB, reason)


def test_other_tests_and_non_ci_runs_keep_their_skips(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    assert not skip_is_a_failure("tests/test_benchmark_forwarding.py", "nginx is not installed")
    monkeypatch.delenv("CI")
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    assert not skip_is_a_failure(LAB, "another lab is up")


def test_the_hook_turns_the_skip_into_a_failure(pytester: pytest.Pytester, monkeypatch) -> None:
    monkeypatch.setenv("CI", "true")
    pytester.makeconftest((Path(__file__).parents[1] / "conftest.py").read_text())
    pytester.makepyfile(
        test_lab_example="""
import pytest
def test_in_the_way():
    pytest.skip("another lab is up (npudure-br0 exists)")
def test_cannot():
    pytest.skip("needs root: run with sudo")
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1, skipped=1)
