"""``--help`` works for every command and subcommand of ``npudure``, found by walking the argparse tree
(a '%' in a help string made argparse raise ValueError in `npudure bench run --help`)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from npudure.cli import build_parser, main


def _paths(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """``prefix`` and the command path of every parser below it, depth first."""
    yield prefix
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _paths(child, (*prefix, name))


PATHS = list(_paths(build_parser(lambda name: True)))


def test_the_walk_reaches_subcommands_of_subcommands() -> None:
    # Guards the walk itself: a tree of one level would mean the sub-CLIs' parsers were not loaded.
    assert any(len(path) >= 2 for path in PATHS)


@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "npudure")
def test_help_exits_zero_and_prints_usage(path: tuple[str, ...], capsys) -> None:
    # Through main(), as a user's argv goes: it loads only the chosen command's module.
    with pytest.raises(SystemExit) as exc:
        main([*path, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: {' '.join(('npudure', *path))}")
