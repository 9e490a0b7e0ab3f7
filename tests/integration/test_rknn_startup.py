"""An agent process started without the vendor's runtime exits 78 naming the file and the fix (moved from
tests/unit: it starts `npudure agent`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from npudure.backends import rknn as rknn_mod

FAKE_RKNNLITE = """
class RKNNLite:
    NPU_CORE_0, NPU_CORE_1, NPU_CORE_2 = 1, 2, 4
    def load_rknn(self, path):
        raise AssertionError("the start-up check must refuse before any context is made")
"""


@pytest.fixture
def fake_site(tmp_path: Path) -> Path:
    pkg = tmp_path / "site" / "rknnlite"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "api.py").write_text(FAKE_RKNNLITE)
    return tmp_path / "site"


@pytest.fixture
def agent_config(tmp_path: Path) -> Path:
    model = tmp_path / "yolov8n.rknn"
    model.write_bytes(b"RKNN fake")
    cfg = tmp_path / "agent.yml"
    cfg.write_text(f"node_name: b1\nbackend: rknn\nmodel: {model}\nnpu_cores: 2\nlisten: 127.0.0.1:0\n")
    return cfg


@pytest.mark.skipif(
    any(Path(p).exists() for p in (rknn_mod.LIBRKNNRT, *rknn_mod.LIBRKNNRT_ALTERNATIVES)),
    reason="this machine has a librknnrt.so: the missing-library path cannot be shown here",
)
def test_agent_without_librknnrt_exits_78_naming_the_file_and_fix(fake_site, agent_config) -> None:
    env = {**os.environ, "PYTHONPATH": str(fake_site)}
    proc = subprocess.run(
        [sys.executable, "-m", "npudure", "agent", "--config", str(agent_config), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert proc.returncode == rknn_mod.EX_CONFIG == 78, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert "/usr/lib/librknnrt.so is missing" in lines[0]
    assert "npudure_rknn_runtime_src" in lines[0] and "backend: onnx" in lines[0]
