"""`npudure lab status` and its --json, formatted from a fake lab's state (no lab is started: read-only)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from npudure_workshop.lab import cli
from npudure_workshop.lab.lab import NodeStatus

BOARDS = [
    NodeStatus("board1", "10.77.0.11", "board", 4242, "running", True),
    NodeStatus("board2", "10.77.0.12", "board", None, "-", False),
    NodeStatus("sched", "10.77.0.2", "scheduler", 4343, "running", True),
]


class FakeLab:
    def __init__(self, statuses: list[NodeStatus], inventory: Path | None) -> None:
        self.state_dir = Path("/var/lib/npudure/lab")
        self.nodes = [s.name for s in statuses]
        self._statuses = statuses
        self.inventory_path = inventory

    def status(self) -> list[NodeStatus]:
        return self._statuses


def test_json_has_every_fact_of_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli._status(FakeLab(BOARDS, Path("/repo/inventory/lab/hosts.yml")), as_json=True)
    out = capsys.readouterr().out
    assert out.count("\n") == 1  # one JSON object, one line
    doc = json.loads(out)
    assert rc == 1 and doc["ok"] is False  # board2 does not answer ssh
    assert doc["state_dir"] == "/var/lib/npudure/lab"
    assert doc["inventory"] == "/repo/inventory/lab/hosts.yml"
    assert doc["boards"][0] == {
        "name": "board1",
        "address": "10.77.0.11",
        "role": "board",
        "nspawn_pid": 4242,
        "systemd": "running",
        "ssh_ok": True,
    }
    assert doc["boards"][1]["nspawn_pid"] is None and doc["boards"][1]["ssh_ok"] is False
    assert [b["name"] for b in doc["boards"]] == ["board1", "board2", "sched"]


def test_a_lab_that_answers_is_ok_in_both_forms(capsys: pytest.CaptureFixture[str]) -> None:
    up = [BOARDS[0], BOARDS[2]]
    assert cli._status(FakeLab(up, None), as_json=True) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is True and doc["inventory"] is None
    assert cli._status(FakeLab(up, None)) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["BOARD", "ADDRESS", "ROLE", "NSPAWN", "PID", "SYSTEMD", "SSH"]
    assert table[1].split() == ["board1", "10.77.0.11", "board", "4242", "running", "ok"]


def test_no_lab_is_an_empty_not_ok_document(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli._status(FakeLab([], None), as_json=True) == 1
    assert json.loads(capsys.readouterr().out) == {
        "ok": False,
        "state_dir": "/var/lib/npudure/lab",
        "inventory": None,
        "boards": [],
    }
    assert cli._status(FakeLab([], None)) == 1
    assert "no lab in /var/lib/npudure/lab" in capsys.readouterr().out


def test_the_flag_is_parsed() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    assert parser.parse_args(["status", "--json"]).json is True
    assert parser.parse_args(["status"]).json is False
