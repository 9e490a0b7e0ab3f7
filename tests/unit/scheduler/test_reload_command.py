"""The ExecReload command's own decisions (the RPC itself: tests/integration/test_fleet_changes.py)."""

from __future__ import annotations

from pathlib import Path

from npudure.proto import inference_pb2 as pb
from npudure.scheduler import reload


def test_a_wildcard_listen_address_is_reached_on_loopback() -> None:
    assert reload.local_target("0.0.0.0:50050") == "127.0.0.1:50050"
    assert reload.local_target("[::]:50050") == "[::1]:50050"
    assert reload.local_target("10.0.0.10:50050") == "10.0.0.10:50050"
    assert reload.local_target("sched.lan:50050") == "sched.lan:50050"


def test_the_summary_is_one_line_naming_each_change() -> None:
    line = reload.summary(pb.ReloadBoardsReply(added=["b4"], removed=["b2"], restart_needed=["queue_limit"]))
    assert "\n" not in line
    assert "added b4" in line and "removing b2 (draining" in line and "next restart: queue_limit" in line
    assert "2 admin token(s) accepted" in reload.summary(pb.ReloadBoardsReply(admin_tokens=2))


def test_a_bad_file_fails_without_reaching_any_scheduler(tmp_path: Path, capsys) -> None:
    (tmp_path / "s.yml").write_text("boards: []\n")
    assert reload.run(str(tmp_path / "s.yml")) == 78
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "keeps its current boards" in err and "boards" in err
