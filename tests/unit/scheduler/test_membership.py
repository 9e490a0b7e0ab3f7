"""The reload's decisions: what joins, what leaves, what is refused, what waits for a restart."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from npudure.config import BoardConfig, SchedulerConfig
from npudure.scheduler.membership import ReloadError, diff_boards, read_config, restart_needed


def boards(*pairs: tuple[str, str]) -> list[BoardConfig]:
    return [BoardConfig(name=n, address=a) for n, a in pairs]


CURRENT = {"b1": "10.0.0.1:50051", "b2": "10.0.0.2:50051"}


def test_a_new_board_is_added_and_a_missing_one_removed() -> None:
    diff = diff_boards(CURRENT, set(), boards(("b1", "10.0.0.1:50051"), ("b3", "10.0.0.3:50051")))
    assert [b.name for b in diff.added] == ["b3"]
    assert diff.removed == ["b2"]


def test_the_same_set_changes_nothing() -> None:
    diff = diff_boards(CURRENT, set(), boards(*CURRENT.items()))
    assert diff.added == [] and diff.removed == []


def test_a_board_that_moved_is_refused_with_what_to_do() -> None:
    with pytest.raises(ReloadError, match=r"b2 moved from 10\.0\.0\.2:50051 to 10\.0\.0\.9:50051: remove it"):
        diff_boards(CURRENT, set(), boards(("b1", "10.0.0.1:50051"), ("b2", "10.0.0.9:50051")))


def test_a_board_still_leaving_is_neither_re_added_nor_removed_twice() -> None:
    with pytest.raises(ReloadError, match="b2 is still leaving"):
        diff_boards({**CURRENT}, {"b2"}, boards(*CURRENT.items()))
    assert diff_boards(CURRENT, {"b2"}, boards(("b1", "10.0.0.1:50051"))).removed == []


def _write(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_bad_file_is_one_line_naming_the_field(tmp_path: Path) -> None:
    data = {"boards": [{"name": "b1", "address": "10.0.0.1:50051"}, {"name": "b1", "address": "10.0.0.2:1"}]}
    with pytest.raises(ReloadError) as caught:
        read_config(_write(tmp_path / "s.yml", data))
    assert "\n" not in str(caught.value) and "'b1' appears twice" in str(caught.value)
    with pytest.raises(ReloadError, match="is not host:port"):
        read_config(_write(tmp_path / "s.yml", {"boards": [{"name": "b1", "address": "10.0.0.1:5OO51"}]}))


def test_fields_other_than_boards_and_policy_wait_for_a_restart() -> None:
    old = SchedulerConfig(boards=boards(("b1", "10.0.0.1:1")))
    new = SchedulerConfig(boards=boards(("b2", "10.0.0.2:1")), policy="p2c", queue_limit=7)
    assert restart_needed(old, new) == ["queue_limit"]


def test_a_reload_re_reads_the_admin_tokens_and_an_unusable_file_refuses_it(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from npudure.config import AdminConfig
    from npudure.scheduler.membership import Membership
    from npudure.security import access as security

    path = tmp_path / "admin-token"
    path.write_text("o" * 32 + "\n")
    path.chmod(0o600)
    guard = security.AdminGuard(AdminConfig(token_file=str(path)), None)
    host = SimpleNamespace(config=SchedulerConfig(boards=boards(("b1", "10.0.0.1:1"))), admin=guard)
    membership = Membership(host)  # type: ignore[arg-type]
    path.write_text("n" * 32 + "\n" + "o" * 32 + "\n")
    assert membership._read_tokens() == ["n" * 32, "o" * 32]
    path.write_text("")
    with pytest.raises(ReloadError, match=r"holds no token.*keeps its current admin tokens"):
        membership._read_tokens()
    assert guard.tokens == ["o" * 32]
