"""``npudure check-answers`` against real agents on loopback: one agent is configured to answer
differently (fewer SYNTHETIC detections per frame) and is the one named."""

from __future__ import annotations

import pytest
from helpers.cli import run_npudure

from npudure_workshop.lab.local import LocalCluster, free_port


@pytest.fixture(scope="module")
def cluster():
    odd = {"sim": {"seed": 3, "synthetic_detections": 2}}  # the others: up to 6 boxes per frame
    with LocalCluster(boards=3, synthetic_detections=6, per_board_overrides={"board3": odd}) as cl:
        yield cl


def test_the_agent_that_answers_differently_is_named(cluster: LocalCluster) -> None:
    addresses = [proc.address for proc in cluster.agents.values()]
    done = run_npudure("check-answers", *addresses)
    assert done.returncode == 1, done.stderr
    board3 = f"board3 ({cluster.agents['board3'].address})"
    rows = {line.split("  ")[0]: line for line in done.stdout.splitlines()[1:4]}
    assert "DIFFERS from the majority" in rows[board3]
    assert all(rows[f"board{i} ({cluster.agents[f'board{i}'].address})"].endswith("agrees") for i in (1, 2))
    assert "SYNTHETIC" in done.stdout
    [problem] = done.stderr.splitlines()
    assert problem.startswith(f"npudure check-answers: {board3}: differs from the majority (2 of 3 boards)")


def test_agents_that_agree_pass_and_an_unreachable_one_is_a_clear_error(cluster: LocalCluster) -> None:
    same = [cluster.agents[name].address for name in ("board1", "board2")]
    done = run_npudure("check-answers", *same)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    closed = f"127.0.0.1:{free_port()}"
    done = run_npudure("check-answers", *same, closed, "--timeout", "1")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith(f"npudure check-answers: {closed}: cannot connect within 1 s")


def test_a_model_is_checked_by_name_on_boards_whose_defaults_differ() -> None:
    """Boards serving several models (#47): board2's default is another model, so frames that name none
    are answered by different models; --model names the one to compare."""
    placed = {"board2": {"models": [{"name": "plates", "default": True}, {"name": "general"}]}}
    with LocalCluster(
        boards=2, models={"general": None, "plates": None}, synthetic_detections=6, per_board_overrides=placed
    ) as cluster:
        addresses = [proc.address for proc in cluster.agents.values()]
        for model in ("general", "plates"):
            done = run_npudure("check-answers", *addresses, "--model", model)
            assert done.returncode == 0 and done.stderr == "", (model, done.stderr)
            assert f"model {model}" in done.stdout.splitlines()[0]
        done = run_npudure("check-answers", *addresses, "--model", "faces")
        assert done.returncode == 1 and "NOT_FOUND" in done.stderr and "Traceback" not in done.stderr
