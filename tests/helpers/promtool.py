"""promtool for the monitoring tests: the real binary (Debian package prometheus, installed by
scripts/bootstrap.sh). Missing as root or in CI is a failure, not a skip: CI must run the rule tests."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

HINT = "promtool is missing: apt-get install prometheus (scripts/bootstrap.sh installs it)"


def require(tool: str = "promtool") -> str:
    path = shutil.which(tool)
    if path:
        return path
    if os.geteuid() == 0 or os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(HINT)
    pytest.skip(HINT)


def run(*args: str | Path, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [require(), *map(str, args)], capture_output=True, text=True, timeout=timeout_s, check=False
    )
