"""The slow-board fault on a pure cgroup-v2 host, on a fake cgroup tree (this machine is v1/hybrid: the
kernel side — that cpu.max then appears and throttles — is untested here; see docs/lab.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from npudure_workshop.lab import board, network
from npudure_workshop.lab.host import LabError


def _v2(tmp_path: Path, controllers: str = "cpuset cpu io memory pids") -> Path:
    root = tmp_path / "cg"
    (root / "npudure-lab").mkdir(parents=True)
    (root / "cgroup.controllers").write_text(controllers + "\n")
    (root / "cgroup.subtree_control").write_text("memory pids\n")
    (root / "npudure-lab" / "cgroup.subtree_control").write_text("\n")
    return root


def test_cpu_controller_is_delegated_to_the_boards(tmp_path: Path) -> None:
    root = _v2(tmp_path)
    assert board.enable_v2_cpu_controller(root)
    assert (root / "cgroup.subtree_control").read_text() == "+cpu\n"
    assert (root / "npudure-lab" / "cgroup.subtree_control").read_text() == "+cpu\n"


def test_already_enabled_is_left_alone(tmp_path: Path) -> None:
    root = _v2(tmp_path)
    for f in (root / "cgroup.subtree_control", root / "npudure-lab" / "cgroup.subtree_control"):
        f.write_text("cpu memory\n")
    assert board.enable_v2_cpu_controller(root)
    assert (root / "npudure-lab" / "cgroup.subtree_control").read_text() == "cpu memory\n"


def test_no_op_on_hybrid_or_without_a_cpu_controller(tmp_path: Path) -> None:
    hybrid = tmp_path / "hybrid"
    (hybrid / "cpu").mkdir(parents=True)
    assert not board.enable_v2_cpu_controller(hybrid)
    assert not board.enable_v2_cpu_controller(_v2(tmp_path, "memory pids"))


def test_a_refused_delegation_is_one_clear_error(tmp_path: Path) -> None:
    root = _v2(tmp_path)
    (root / "npudure-lab" / "cgroup.subtree_control").unlink()
    (root / "npudure-lab" / "cgroup.subtree_control").mkdir()  # writing it fails like EBUSY would
    with pytest.raises(LabError, match="cannot enable the cgroup-v2 cpu controller"):
        board.enable_v2_cpu_controller(root)


def test_slow_board_quota_is_written_to_cpu_max_and_removed(tmp_path: Path) -> None:
    root = _v2(tmp_path)
    node = network.plan_nodes(1, scheduler_host=False)[0]
    cg = root / "npudure-lab" / node.name
    cg.mkdir()
    (cg / "cpu.max").write_text("max 100000\n")
    paths = board.BoardPaths(node, tmp_path / "state")
    board.set_cpu_quota(paths, 0.25, root=root)
    assert (cg / "cpu.max").read_text() == "25000 100000\n"
    board.set_cpu_quota(paths, None, root=root)
    assert (cg / "cpu.max").read_text() == "max 100000\n"
    (cg / "cpu.max").unlink()
    with pytest.raises(LabError, match="subtree_control"):
        board.set_cpu_quota(paths, 0.25, root=root)
