"""The scheduler's state file: round trip, atomic replacement, what a restart re-applies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from npudure.scheduler import state
from npudure.scheduler.state import SavedState


def test_a_saved_state_reads_back(tmp_path: Path) -> None:
    saved = SavedState(
        policy="p2c",
        config_policy="least_inflight",
        drained=["b2"],
        inactive=["b3"],
        lease_holder="bench pid 7",
        lease_until_unix=1.8e9,
    )
    path = tmp_path / "state.json"
    state.save(path, saved)
    assert state.load(path) == saved
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left beside it


def test_saving_replaces_the_file_whole(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    state.save(path, SavedState("p2c", "p2c", drained=["b1", "b2"]))
    state.save(path, SavedState("ect", "p2c"))
    assert json.loads(path.read_text())["drained"] == []
    assert state.load(path) == SavedState("ect", "p2c")


def test_a_failed_write_keeps_the_old_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "state.json"
    state.save(path, SavedState("p2c", "p2c", drained=["b1"]))

    def broken_fsync(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(state.os, "fsync", broken_fsync)
    with pytest.raises(OSError):
        state.save(path, SavedState("ect", "p2c"))
    assert state.load(path) == SavedState("p2c", "p2c", drained=["b1"])
    assert list(tmp_path.iterdir()) == [path]


def test_no_file_is_no_state(tmp_path: Path) -> None:
    assert state.load(tmp_path / "state.json") is None


@pytest.mark.parametrize(
    "text", ["{not json", '{"version": 99, "policy": "p2c", "config_policy": "p2c"}', "[]"]
)
def test_an_unusable_file_is_ignored_with_a_warning(tmp_path: Path, text: str, caplog) -> None:
    path = tmp_path / "state.json"
    path.write_text(text)
    assert state.load(path) is None
    assert "ignoring the saved state" in caplog.text


def test_the_saved_policy_holds_only_while_the_config_policy_is_unchanged() -> None:
    saved = SavedState(policy="round_robin", config_policy="least_inflight")
    assert saved.policy_for("least_inflight") == "round_robin"
    assert saved.policy_for("p2c") == "p2c"  # the operator edited policy: in the config since


def test_inactive_boards_are_those_still_configured_and_never_all() -> None:
    saved = SavedState("p2c", "p2c", inactive=["b2", "gone"])
    assert saved.inactive_among(["b1", "b2"]) == {"b2"}
    assert saved.inactive_among(["b2"]) == set()  # would leave no board active


def test_the_path_is_the_config_one_else_systemds_state_directory(tmp_path: Path) -> None:
    assert state.state_path("/x/s.json", {}) == Path("/x/s.json")
    assert state.state_path(None, {"STATE_DIRECTORY": "/var/lib/a:/var/lib/b"}) == Path(
        "/var/lib/a/state.json"
    )
    assert state.state_path(None, {}) is None
