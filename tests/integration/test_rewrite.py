"""`npudure model convert` refuses a graph that is not a YOLOv8 head in one line (moved from tests/unit: it
starts `npudure`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from helpers.onnx_graphs import single_output_graph


def test_cli_refuses_a_graph_that_is_not_a_head_in_one_line(tmp_path: Path) -> None:
    bad = single_output_graph(tmp_path / "bad.onnx")
    proc = subprocess.run(
        [sys.executable, "-m", "npudure", "model", "convert", "--platform", "rk3588", str(bad)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 65 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "not a YOLOv8 detection head" in lines[0] and "'not_a_head'" in lines[0]
