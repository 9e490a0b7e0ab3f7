"""The self-test through ``npudure agent``: contexts sharing state exit 78 with one line; a lab-speed sim
board passes it in well under a second."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.cli import ROOT, agent_config, run_npudure

pytestmark = pytest.mark.timeout(60)

# The agent's own CLI, with its backend swapped for echo contexts (helpers/echo_contexts.py).
AGENT_WITH_ECHO_CONTEXTS = """
import sys
from helpers.echo_contexts import EchoBackend
import npudure.agent.cli as agent_cli
agent_cli.create_backend = lambda config, count=None: EchoBackend(count, shared=sys.argv[2] == "shared")
from npudure.cli import main
sys.exit(main(["agent", "--config", sys.argv[1], *sys.argv[3:]]))
"""


def _agent(tmp_path: Path, sharing: str, *args: str) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "agent.yml"
    # onnx, so the self-test runs the (swapped) backend's own contexts; its model is never opened.
    config.write_text(agent_config(f"backend: onnx\nmodel: {tmp_path / 'm.onnx'}\ncontexts: 6\n"))
    # No malloc re-exec: it would restart as `python -m npudure`, without the swapped backend.
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
        "NPUDURE_NO_REEXEC": "1",
    }
    return subprocess.run(
        [sys.executable, "-c", AGENT_WITH_ECHO_CONTEXTS, str(config), sharing, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def test_contexts_sharing_state_refuse_to_start_with_exit_78_and_one_line(tmp_path: Path) -> None:
    bad = _agent(tmp_path, "shared")
    assert bad.returncode == 78, bad.stderr
    assert "Traceback" not in bad.stderr
    lines = bad.stderr.strip().splitlines()
    assert len(lines) == 1, bad.stderr
    assert re.fullmatch(
        r"npudure agent: self-test: context \d returned the answer to context \d's frame when all 6 contexts "
        r"ran at once, .* the contexts share state; refusing to start",
        lines[0],
    )
    ok = _agent(tmp_path, "own", "--check")
    assert ok.returncode == 0, ok.stderr
    assert "6 context(s) (agent config)" in ok.stdout and "self-test passed: 6 context(s)" in ok.stdout


def test_a_lab_speed_sim_board_passes_in_well_under_a_second(tmp_path: Path) -> None:
    config = tmp_path / "agent.yml"
    config.write_text(agent_config("backend: sim\nsim:\n  time_scale: 20\n"))
    done = run_npudure("agent", "--config", str(config), "--check")
    assert done.returncode == 0, done.stderr
    assert "8 context(s) (sim default (emulated RK3576), measured on the RK3576)" in done.stdout
    seconds = float(
        re.search(
            r"self-test passed: 8 context\(s\) each answered its own frame \(([\d.]+) s\)", done.stdout
        )[1]
    )  # type: ignore[index]
    assert seconds < 1.0
