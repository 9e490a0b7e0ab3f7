"""The repository has no secrets, by scripts/secret_scan.py run as CI runs it (moved from tests/unit: it
runs the script)."""

import subprocess
import sys

from helpers.cli import ROOT


def test_repository_has_no_secrets() -> None:
    proc = subprocess.run(
        [sys.executable, "scripts/secret_scan.py"], cwd=ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout
