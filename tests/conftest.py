import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytest_plugins = ("pytester",)  # tests/unit/test_ci_skips.py runs the lab-skip hook in a sandbox
sys.path.insert(0, str(Path(__file__).parent))
# A few test modules share helpers and fixtures with a sibling (test_site_tls uses test_site's fleet):
# they import it by name, so every test folder is importable.
sys.path[1:1] = sorted(
    str(p) for p in Path(__file__).parent.rglob("*") if p.is_dir() and p.name != "__pycache__"
)

# Child processes (agents, scheduler) must find the same interpreter's tools.
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT


def have(tool: str) -> bool:
    return shutil.which(tool) is not None


def run_npudure(*args: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``npudure ARGS`` with this interpreter; capture its output (bounded)."""
    return subprocess.run(
        [sys.executable, "-m", "npudure", *args], capture_output=True, text=True, timeout=timeout_s
    )


def run_service(folder: Path, service: str, config_text: str) -> subprocess.CompletedProcess[str]:
    """Write ``config_text`` to FOLDER/SERVICE.yml and run ``npudure SERVICE --config`` on it."""
    config = folder / f"{service}.yml"
    config.write_text(config_text)
    return run_npudure(service, "--config", str(config))


@pytest.fixture(scope="module")
def model_cache(tmp_path_factory: pytest.TempPathFactory):
    """NPUDURE_CACHE for model tests: one folder per session, so each model is built once."""
    root = tmp_path_factory.getbasetemp() / "npudure-cache"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NPUDURE_CACHE", str(root))
        yield root


# ---------------------------------------------------------------------- lab skips are failures in CI
# The lab/fleet/molecule/fault/appliance tests may skip only when this machine truly cannot run them.
# As root (or with CI=true) any other skip — a leftover bridge, another lab up, a lab that would not
# boot — is a failure: a CI run must not go green without having run them.
MACHINE_CANNOT = (
    "needs root",
    "missing Debian packages",
    "systemd-nspawn missing",
    "molecule/ansible-core missing",
    "ansible-playbook is not in",
    "the lab is not importable",
    "no v1 cpu hierarchy",
)


def strict_lab_skips() -> bool:
    return os.geteuid() == 0 or os.environ.get("CI", "").lower() in ("1", "true", "yes")


def skip_is_a_failure(is_lab_test: bool, reason: str) -> bool:
    """A lab test is one marked ``lab`` (the marker, not the file name: files move)."""
    return strict_lab_skips() and is_lab_test and not any(fragment in reason for fragment in MACHINE_CANNOT)


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
