"""The ``npudure`` command table: every entry's module, one-line help and example belong together."""

from __future__ import annotations

import importlib

import pytest

from npudure.cli import COMMANDS, main


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
