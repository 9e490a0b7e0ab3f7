"""`npudure agent --check` uses every NPU core of the detected SoC and refuses more with exit 78 (moved
from tests/unit: it starts `npudure agent`)."""

from __future__ import annotations

from pathlib import Path

import yaml
from helpers.cli import run_npudure
from helpers.devicetree import COMPATIBLE, fake_sysfs


def _agent_check(tmp_path: Path, board: str, **fields: object):  # type: ignore[no-untyped-def]
    root = fake_sysfs(tmp_path / board, COMPATIBLE[board])
    path = tmp_path / f"{board}.yml"
    path.write_text(
        yaml.safe_dump({"node_name": "b", "backend": "sim", "affinity": {"sysfs_root": str(root)}, **fields})
    )
    return run_npudure("agent", "--config", str(path), "--check")


def test_agent_start_uses_every_core_and_refuses_too_many_with_exit_78(tmp_path: Path) -> None:
    ok = _agent_check(tmp_path, "rk3588")
    assert ok.returncode == 0, ok.stderr
    # The sim emulates an RK3576: 8 contexts whatever the SoC, on the 3 NPU cores it found.
    assert "8 context(s) (sim default" in ok.stdout and "RK3588 (3 NPU cores" in ok.stdout
    bad = _agent_check(tmp_path, "rk3576", npu_cores=3)
    assert bad.returncode == 78
    assert "Traceback" not in bad.stderr
    lines = bad.stderr.strip().splitlines()
    assert len(lines) == 1 and "RK3576 with 2 NPU cores" in lines[0] and "set npu_cores to 2" in lines[0]
