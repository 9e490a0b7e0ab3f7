import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))

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


@pytest.fixture(scope="module")
def model_cache(tmp_path_factory: pytest.TempPathFactory):
    """NPUDURE_CACHE for model tests: one folder per session, so each model is built once."""
    root = tmp_path_factory.getbasetemp() / "npudure-cache"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NPUDURE_CACHE", str(root))
        yield root
