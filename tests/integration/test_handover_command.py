"""`npudure scheduler handover` with a pid file naming an exited process (moved from tests/unit: it starts
a Python to get such a pid)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from helpers.handover import scheduler_config

from npudure.scheduler import handover
from npudure.service.handover import PID_NAME


def test_a_pid_file_naming_an_exited_process_is_exit_3_too(tmp_path: Path, capsys) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    (tmp_path / PID_NAME).write_text(f"{gone.pid}\n")
    assert handover.run(str(scheduler_config(tmp_path))) == 3
    assert "no scheduler serves" in capsys.readouterr().err
