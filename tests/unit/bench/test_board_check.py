"""What `npudure bench` asks of the active boards, checked before a result folder is made."""

from __future__ import annotations

import argparse

import pytest

from npudure_workshop.bench import cli


def _check(argv: list[str], active: list[str]) -> None:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    # --concurrency is required where the command takes one; the others ignore an unknown option here
    args, _ = parser.parse_known_args([*argv, "--target", "127.0.0.1:1", "--concurrency", "1"])
    cli.board_check(args)(active)


@pytest.mark.parametrize(
    ("argv", "active", "refusal"),
    [
        (
            ["hetero", "--hetero-board", "board9"],
            ["board1", "board2"],
            "--hetero-board 'board9' is not an active",
        ),
        (["hetero"], ["board1"], "needs at least 2 boards"),
        (["capacity", "--hetero-board", "b9"], ["board1", "board2"], "--hetero-board 'b9' is not an active"),
        (["capacity"], ["board1"], "the capacity experiment needs at least 2 boards"),
        # `bench run` caps the named board only after its sweep and scaling: the typo is caught first.
        (["run", "--hetero-board", "borad2"], ["board1", "board2"], "boards are: board1, board2"),
        # beyond --boards-max the board is not one the run may use
        (["run", "--boards-max", "2", "--hetero-board", "board3"], ["board1", "board2", "board3"], "board3"),
        (["local", "--board", "board7"], ["board1"], "--board 'board7' is not an active board"),
        (["local"], [], "no board is active"),
    ],
)
def test_a_board_the_command_cannot_use_is_refused(argv: list[str], active: list[str], refusal: str) -> None:
    with pytest.raises(ValueError, match=refusal):
        _check(argv, active)


@pytest.mark.parametrize(
    ("argv", "active"),
    [
        (["hetero", "--hetero-board", "board2"], ["board1", "board2"]),
        (["hetero"], ["board1", "board2"]),
        (["capacity"], ["board1", "board2", "board3"]),
        (["run"], ["board1"]),  # one board: `run` skips the dial rather than refusing
        (["run", "--boards-max", "2", "--hetero-board", "board2"], ["board1", "board2", "board3"]),
        (["local", "--board", "board1"], ["board1", "board2"]),
        (["local"], ["board1"]),
        (["sweep"], []),  # names no board
        (["scaling"], ["board1"]),
    ],
)
def test_a_board_choice_the_cluster_has_passes(argv: list[str], active: list[str]) -> None:
    _check(argv, active)
