"""Run the ``npudure`` command line the way a user does: this interpreter, a real child process."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def have(tool: str) -> bool:
    return shutil.which(tool) is not None


def run_npudure(*args: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``npudure ARGS`` with this interpreter; capture its output (bounded)."""
    return subprocess.run(
        [sys.executable, "-m", "npudure", *args], capture_output=True, text=True, timeout=timeout_s
    )


def agent_config(extra: str = "") -> str:
    """An agent config on loopback (node b1, a free port, no metrics endpoint), then ``extra``."""
    from npudure_workshop.lab.local import (
        free_port,  # here: the CLI tests that only spawn need none of the lab
    )

    return f"node_name: b1\nlisten: 127.0.0.1:{free_port()}\nmetrics_port: 0\n{extra}"


def run_service(folder: Path, service: str, config_text: str) -> subprocess.CompletedProcess[str]:
    """Write ``config_text`` to FOLDER/SERVICE.yml and run ``npudure SERVICE --config`` on it."""
    config = folder / f"{service}.yml"
    config.write_text(config_text)
    return run_npudure(service, "--config", str(config))
