"""`npudure bench sweep` against a port nobody listens on names the scheduler it cannot reach (moved from
tests/unit: it dials)."""

from __future__ import annotations

from pathlib import Path

import pytest

from npudure_workshop.bench import cli


def _quiet_sweep(out: Path) -> int:
    """`npudure bench sweep` of one frame against a port nobody listens on, into ``out``."""
    from npudure.cli import main

    argv = ["bench", "sweep", "--target", "127.0.0.1:9", "--out", str(out), "--frames", "1"]
    return main([*argv, "--progress", "quiet"])


def test_cli_names_an_unreachable_scheduler(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = _quiet_sweep(tmp_path / "new")
    assert rc == cli.EXIT_ERROR
    assert "cannot reach the scheduler at 127.0.0.1:9" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()
