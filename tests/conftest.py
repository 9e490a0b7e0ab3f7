import os
import sys
from pathlib import Path

import pytest
from helpers.cli import ROOT
from helpers.lab_skips import skip_is_a_failure

pytest_plugins = ("pytester",)  # tests/unit/test_ci_skips.py runs the lab-skip hook in a sandbox

# Child processes (agents, scheduler) must find the same interpreter's tools.
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT


@pytest.fixture(scope="module")
def model_cache(tmp_path_factory: pytest.TempPathFactory):
    """NPUDURE_CACHE for model tests: one folder per session, so each model is built once."""
    root = tmp_path_factory.getbasetemp() / "npudure-cache"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NPUDURE_CACHE", str(root))
        yield root


# ---------------------------------------------------------------------- lab skips are failures in CI
# As root (or with CI=true) a lab test may skip only when the machine cannot run it (helpers/lab_skips.py).
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and isinstance(report.longrepr, tuple):
        reason = str(report.longrepr[2])
        if skip_is_a_failure(item.get_closest_marker("lab") is not None, reason):
            report.outcome = "failed"
            report.longrepr = f"a lab test skipped on a machine that can run it (root or CI): {reason}"


# ---------------------------------------------------------------------- long lab scenarios
# A scenario marked ``long`` takes longer than CI's budget allows (e.g. a board leaving and joining the
# live fleet, ~20 min on a 2-core host): it runs only when asked for by name, ``pytest -m long``.
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "long" in (config.getoption("markexpr") or ""):
        return
    kept = [item for item in items if item.get_closest_marker("long") is None]
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[i for i in items if i.get_closest_marker("long") is not None])
        items[:] = kept
