"""The handover command's own decisions (the handover: tests/integration/test_scheduler_handover.py)."""

from __future__ import annotations

from pathlib import Path

from helpers.handover import scheduler_config

from npudure.scheduler import handover


def test_nothing_serving_is_exit_3_in_one_line_so_the_role_restarts(tmp_path: Path, capsys) -> None:
    assert handover.run(str(scheduler_config(tmp_path))) == handover.EX_NOT_RUNNING == 3
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no scheduler serves" in err and "start or restart it" in err
