"""An emulated board's CPU budget from the board-cpu projection (docs/board-cpu.md), scaled with the
time scale, and given back (not the whole host) when a slow-board fault ends."""

from __future__ import annotations

from pathlib import Path

import pytest

from npudure_workshop.lab import board as boardmod
from npudure_workshop.lab import board_cpu
from npudure_workshop.lab.lab import Lab


def test_an_rk3576_is_four_a72_cores_at_the_projections_pessimistic_end() -> None:
    # docs/board-cpu.md: r(A72) = 2.5-3.1, r(A76) = 1.3-2.1 (host-core seconds per board-core second).
    assert board_cpu.budget("a72", 1.0) == pytest.approx(4 / 3.1)
    assert board_cpu.budget("a76", 1.0) == pytest.approx(4 / 2.1)


def test_the_budget_shrinks_with_the_time_scale() -> None:
    assert board_cpu.budget("a72", 10.0) == pytest.approx(board_cpu.budget("a72", 1.0) / 10)


def test_host_means_uncapped_and_every_capped_line_says_projection() -> None:
    assert board_cpu.budget("host", 2.5) is None
    assert board_cpu.budget(None, 2.5) is None
    assert "PROJECTION" in board_cpu.describe("a72", 10.0)
    assert "uncapped" in board_cpu.describe("host", 10.0)


def _lab(tmp_path: Path, profile: str, calls: list, monkeypatch: pytest.MonkeyPatch) -> Lab:
    monkeypatch.setattr(boardmod, "set_cpu_quota", lambda paths, cap: calls.append((paths.node.name, cap)))
    lab = Lab(tmp_path / "state")
    board = {"name": "board1", "role": "board", "address": "10.231.0.11"}
    lab._save({"phase": "up", "board_cpu": profile, "time_scale": 10.0, "nodes": [board]})
    return lab


def test_a_fault_ends_by_giving_the_board_its_budget_back(tmp_path: Path, monkeypatch) -> None:
    calls: list = []
    lab = _lab(tmp_path, "a72", calls, monkeypatch)
    lab.set_cpu_quota("board1", 0.05)
    lab.set_cpu_quota("board1", None)
    assert calls == [("board1", 0.05), ("board1", pytest.approx(4 / 3.1 / 10))]


def test_without_a_profile_a_fault_ends_uncapped(tmp_path: Path, monkeypatch) -> None:
    calls: list = []
    lab = _lab(tmp_path, "host", calls, monkeypatch)
    lab.set_cpu_quota("board1", None)
    assert calls == [("board1", None)]


def test_an_unknown_profile_is_refused_before_anything_starts(tmp_path: Path) -> None:
    from npudure_workshop.lab.host import LabError

    with pytest.raises(LabError, match="--board-cpu must be one of host, a72, a76"):
        Lab(tmp_path / "state").up(boards=1, board_cpu="a53", time_scale=1.0)
