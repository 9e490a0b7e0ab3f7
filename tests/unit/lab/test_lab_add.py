"""``npudure lab add`` / ``lab remove`` with fakes for the root-only steps (network, overlay, nspawn):
which board comes next, what the state and the inventory record, and a failed boot undone. No root."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from npudure_workshop.lab import lab as labmod
from npudure_workshop.lab import network
from npudure_workshop.lab.host import LabError


def test_the_next_board_is_the_lowest_free_index_and_the_scheduler_stays_last():
    nodes = network.plan_nodes(3, scheduler_host=True)
    added = network.next_board(nodes)
    assert (added.name, added.address, added.role) == ("board4", "10.231.0.14", "board")
    grown = network.with_board(nodes, added)
    assert [n.name for n in grown] == ["board1", "board2", "board3", "board4", "sched"]
    gap = [n for n in nodes if n.name != "board2"]
    assert network.next_board(gap).name == "board2"
    assert [n.name for n in network.with_board(gap, network.next_board(gap))][:3] == [
        "board1",
        "board2",
        "board3",
    ]


def test_a_full_lab_refuses_another_board():
    nodes = network.plan_nodes(network.MAX_BOARDS, scheduler_host=False)
    with pytest.raises(LabError, match="room for"):
        network.next_board(nodes)


class FakeMachines:
    """The root-only steps of booting and removing a board, recorded instead of done."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, fail_boot: bool = False) -> None:
        self.calls: list[tuple[str, str]] = []
        self.fail_boot = fail_boot
        board = labmod.boardmod
        for name in ("make_cgroups", "stop_signal", "remove_dir"):
            monkeypatch.setattr(board, name, self._record(name))
        monkeypatch.setattr(
            board, "mount_overlay", lambda paths, image: self.calls.append(("mount", paths.node.name))
        )
        monkeypatch.setattr(board, "personalize", self._personalize)
        monkeypatch.setattr(
            board, "start_launcher", lambda paths, cmd: self.calls.append(("boot", paths.node.name))
        )
        monkeypatch.setattr(board, "launcher_pid", lambda paths: 1)
        monkeypatch.setattr(board, "nspawn_pid", lambda paths: 1)
        monkeypatch.setattr(
            board, "stop", lambda paths, timeout: self.calls.append(("stop", paths.node.name))
        )
        monkeypatch.setattr(board, "remove_cgroups", lambda paths: [])
        # The host's own cgroup tree is not the fake lab's (a real lab may be up beside the unit tests).
        monkeypatch.setattr(board.BoardPaths, "cgroups", lambda self: [])
        monkeypatch.setattr(network, "create_node_net", lambda node: self.calls.append(("net", node.name)))
        monkeypatch.setattr(network, "remove_node_net", lambda node: self.calls.append(("unnet", node.name)))
        # The running lab's bridge exists (it is its own); nothing of a board4 does.
        monkeypatch.setattr(network, "link_exists", lambda name: name == network.BRIDGE)
        monkeypatch.setattr(network, "netns_exists", lambda name: False)
        monkeypatch.setattr(labmod.Lab, "_ensure_key", lambda self: "ssh-ed25519 AAAA lab")
        monkeypatch.setattr(
            labmod.Lab, "_wait_ssh", lambda lab, nodes, timeout: self._wait_ssh(nodes, timeout)
        )
        monkeypatch.setattr(labmod.Lab, "_save_failure_logs", lambda self, nodes: Path("/nowhere"))

    def _record(self, name: str):
        return lambda paths: self.calls.append((name, paths.node.name))

    def _personalize(self, paths, nodes, pubkey) -> None:
        self.calls.append(("personalize", paths.node.name))
        (paths.root / "etc").mkdir(parents=True, exist_ok=True)

    def _wait_ssh(self, nodes, timeout) -> None:
        if self.fail_boot:
            raise LabError(f"sshd did not answer within {timeout:.0f} s on {nodes[0].name}")


def _running_lab(tmp_path: Path, boards: int = 3, **extra) -> labmod.Lab:
    lab = labmod.Lab(tmp_path / "state")
    nodes = network.plan_nodes(boards, scheduler_host=True)
    inventory = tmp_path / "inventory" / "lab" / "hosts.yml"
    lab._save(
        {
            "phase": "up",
            "boards": boards,
            "scheduler_host": True,
            "backend": "sim",
            "arm64_boards": 0,
            "time_scale": 2.5,
            "nodes": [n.__dict__ for n in nodes],
            "inventory": str(inventory),
            "image": str(tmp_path / "image"),
            **extra,
        }
    )
    lab._write_inventory(json.loads(lab.state_file.read_text()), nodes, inventory)
    for node in nodes:  # each running machine's root, with the /etc/hosts lab up wrote
        etc = lab.root(node.name) / "etc"
        etc.mkdir(parents=True)
        (etc / "hosts").write_text("old\n")
    return lab


def _inventory_boards(lab: labmod.Lab) -> dict:
    assert lab.inventory_path is not None
    return yaml.safe_load(lab.inventory_path.read_text())["all"]["children"]["boards"]["hosts"]


def test_add_boots_board4_and_puts_it_in_the_state_the_inventory_and_every_hosts_file(tmp_path, monkeypatch):
    machines = FakeMachines(monkeypatch)
    lab = _running_lab(tmp_path)
    node = lab._add(log=lambda _m: None, timeout=5)
    assert node.name == "board4"
    assert [c for c in machines.calls if c[1] == "board4"] == [
        ("net", "board4"),
        ("make_cgroups", "board4"),
        ("mount", "board4"),
        ("personalize", "board4"),
        ("boot", "board4"),
    ]
    state = json.loads(lab.state_file.read_text())
    assert state["boards"] == 4 and state["phase"] == "up"
    assert [n.name for n in lab.nodes] == ["board1", "board2", "board3", "board4", "sched"]
    assert _inventory_boards(lab)["board4"] == {"ansible_host": "10.231.0.14"}
    assert "10.231.0.14\tboard4" in (lab.root("sched") / "etc" / "hosts").read_text()
    assert "10.231.0.14\tboard4" in (lab.root("board1") / "etc" / "hosts").read_text()


def test_a_board_that_does_not_boot_is_removed_again_and_the_lab_left_as_it_was(tmp_path, monkeypatch):
    machines = FakeMachines(monkeypatch, fail_boot=True)
    lab = _running_lab(tmp_path)
    with pytest.raises(LabError, match="board4: sshd did not answer"):
        lab._add(log=lambda _m: None, timeout=5)
    assert ("stop", "board4") in machines.calls and ("unnet", "board4") in machines.calls
    assert [n.name for n in lab.nodes] == ["board1", "board2", "board3", "sched"]
    assert json.loads(lab.state_file.read_text())["boards"] == 3
    assert set(_inventory_boards(lab)) == {"board1", "board2", "board3"}


def test_remove_takes_the_board_out_of_the_state_and_the_inventory(tmp_path, monkeypatch):
    machines = FakeMachines(monkeypatch)
    monkeypatch.setattr(labmod.os, "geteuid", lambda: 0)
    monkeypatch.setattr(labmod.imagemod, "cache_dir", lambda: tmp_path / "cache" / "images")
    lab = _running_lab(tmp_path, boards=4)
    lab.remove("board4", log=lambda _m: None)
    assert ("stop", "board4") in machines.calls and ("remove_dir", "board4") in machines.calls
    assert [n.name for n in lab.nodes] == ["board1", "board2", "board3", "sched"]
    assert json.loads(lab.state_file.read_text())["boards"] == 3
    assert set(_inventory_boards(lab)) == {"board1", "board2", "board3"}
    assert "board4" not in (lab.root("board1") / "etc" / "hosts").read_text()


@pytest.mark.parametrize(
    ("boards", "name", "why"),
    [(3, "sched", "scheduler host"), (1, "board1", "last board"), (3, "board9", "no board named")],
)
def test_remove_refuses_what_it_cannot_take(tmp_path, monkeypatch, boards, name, why):
    FakeMachines(monkeypatch)
    monkeypatch.setattr(labmod.os, "geteuid", lambda: 0)
    monkeypatch.setattr(labmod.imagemod, "cache_dir", lambda: tmp_path / "cache" / "images")
    lab = _running_lab(tmp_path, boards=boards)
    with pytest.raises(LabError, match=why):
        lab.remove(name, log=lambda _m: None)


def test_add_refuses_without_a_running_lab_and_on_an_arm64_lab(tmp_path, monkeypatch):
    FakeMachines(monkeypatch)
    with pytest.raises(LabError, match="no lab is up"):
        labmod.Lab(tmp_path / "none")._add(log=lambda _m: None, timeout=5)
    lab = _running_lab(tmp_path, arm64_boards=1)
    with pytest.raises(LabError, match="arm64"):
        lab._add(log=lambda _m: None, timeout=5)
