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
