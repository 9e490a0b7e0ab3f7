"""The ``npudure`` command table: every entry's module, one-line help and example belong together."""

from __future__ import annotations

import importlib
import sys

import pytest

from npudure.cli import COMMANDS, WORKSHOP, main


@pytest.mark.parametrize("name", list(COMMANDS))
def test_each_command_names_a_module_with_the_interface_and_an_example_of_itself(name, capsys) -> None:
    command = COMMANDS[name]
    module = importlib.import_module(command.module)
    assert callable(module.add_arguments) and callable(module.run)
    assert command.example.removeprefix("sudo ").startswith(f"npudure {name}")
    with pytest.raises(SystemExit) as exc:
        main([name, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert command.help in out and f"example: {command.example}" in out


def test_no_command_prints_the_table_and_says_usage(capsys) -> None:
    assert main([]) == 2
    out = capsys.readouterr().out
    assert all(f"    {name}" in out for name in COMMANDS)


class _NoWorkshop:
    """A finder ahead of all others that finds no workshop, as on a machine that has none."""

    def find_spec(self, name: str, path: object, target: object = None) -> None:
        if name == WORKSHOP:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


def _without_the_workshop(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process as a board sees it: ``import npudure_workshop`` fails as an absent package does, and no
    workshop module is already loaded."""
    for name in [m for m in sys.modules if m == WORKSHOP or m.startswith(WORKSHOP + ".")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [_NoWorkshop(), *sys.meta_path])


WORKSHOP_COMMANDS = [name for name, command in COMMANDS.items() if command.module.startswith(WORKSHOP + ".")]


def test_the_workshop_commands_are_the_five() -> None:
    assert sorted(WORKSHOP_COMMANDS) == ["bench", "faults", "lab", "local", "model"]


@pytest.mark.parametrize("argv", [["bench", "run", "--quick"], ["local", "--help"], ["model", "build"]])
def test_a_workshop_command_without_the_workshop_says_so_in_one_line(argv, monkeypatch, capsys) -> None:
    _without_the_workshop(monkeypatch)
    assert main(argv) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err
    assert captured.err.startswith(f"npudure {argv[0]}: part of the controller's workshop (npudure-workshop)")
    assert "pip install 'npudure[controller]'" in captured.err


def test_without_the_workshop_the_command_list_and_the_runtime_commands_work(monkeypatch, capsys) -> None:
    _without_the_workshop(monkeypatch)
    assert main([]) == 2
    out = capsys.readouterr().out
    assert all(f"    {name}" in out for name in COMMANDS)
    with pytest.raises(SystemExit) as exc:
        main(["status", "--help"])
    assert exc.value.code == 0


def test_a_broken_import_inside_the_workshop_is_not_reported_as_a_missing_workshop(monkeypatch) -> None:
    """Only the workshop package itself missing is a missing install; anything else is a bug to show."""
    monkeypatch.setitem(sys.modules, "npudure_workshop.bench.cli", None)
    with pytest.raises(ModuleNotFoundError):
        main(["bench", "--help"])
