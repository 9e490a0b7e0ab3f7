"""The handover command's own decisions (the handover: tests/integration/test_scheduler_handover.py)."""

from __future__ import annotations

from pathlib import Path

import yaml

from npudure.scheduler import handover


def _config(tmp_path: Path) -> Path:
    path = tmp_path / "s.yml"
    path.write_text(
        yaml.safe_dump(
            {"boards": [{"name": "b1", "address": "127.0.0.1:1"}], "state_file": str(tmp_path / "state.json")}
        )
    )
    return path


def test_nothing_serving_is_exit_3_in_one_line_so_the_role_restarts(tmp_path: Path, capsys) -> None:
    assert handover.run(str(_config(tmp_path))) == handover.EX_NOT_RUNNING == 3
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no scheduler serves" in err and "start or restart it" in err
