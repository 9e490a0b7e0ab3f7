"""Long commands group their options and show their defaults (issue #48): `npudure bench run` (55
options) and `npudure local`, and every bench subcommand through their shared groups."""

from __future__ import annotations

import argparse

import pytest

from npudure.cli import DefaultsHelpFormatter, build_parser, main

LONG = [("bench", "run"), ("bench", "sweep"), ("bench", "local"), ("bench", "openloop"), ("local",)]


def _parser(path: tuple[str, ...]) -> argparse.ArgumentParser:
    parser = build_parser(lambda name: name == path[0])
    for name in path:
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = action.choices[name]
    return parser


@pytest.mark.parametrize("path", LONG, ids=" ".join)
def test_options_are_grouped(path: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    parser = _parser(path)
    groups = [g for g in parser._action_groups if g.title not in ("positional arguments", "options")]
    assert len(groups) >= 3, [g.title for g in groups]
    ungrouped = [a.dest for g in parser._action_groups if g.title == "options" for a in g._group_actions]
    assert ungrouped == ["help"]  # every option of the command sits in a group
    with pytest.raises(SystemExit):
        main([*path, "--help"])
    out = capsys.readouterr().out
    assert all(f"\n{g.title}:\n" in out for g in groups)


@pytest.mark.parametrize("path", LONG, ids=" ".join)
def test_every_option_says_what_it_does_and_its_default(path: tuple[str, ...]) -> None:
    formatter = DefaultsHelpFormatter("npudure")
    for action in _parser(path)._actions:
        if not action.option_strings or action.dest == "help":
            continue
        assert action.help, f"{action.option_strings[0]} has no help"
        shown = formatter._get_help_string(action) or ""
        trivial = action.default is None or action.default is False or action.default == []
        assert trivial or "default" in shown, f"{action.option_strings[0]}: its default is not shown"


def test_a_default_is_added_once_and_only_where_there_is_one() -> None:
    parser = argparse.ArgumentParser(formatter_class=DefaultsHelpFormatter)
    parser.add_argument("--a", default=2, help="alpha")
    parser.add_argument("--b", default=3, help="beta (default 3)")
    parser.add_argument("--c", help="gamma")
    parser.add_argument("--d", action="store_true", help="delta")
    parser.add_argument("--e", type=int, default=0, help="epsilon")
    parser.add_argument("--f", action="append", default=[], help="zeta")
    text = " ".join(parser.format_help().split())
    assert "alpha (default: 2)" in text and "beta (default 3) --c" in text
    assert "gamma --d" in text and "delta --e" in text and "epsilon (default: 0)" in text
    assert text.endswith("zeta")
