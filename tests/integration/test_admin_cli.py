"""``npudure admin`` against a real scheduler and agents on loopback: drain, wait for the board to be
idle and to report the drain to proxyless clients, undrain, and the errors an operator meets."""

from __future__ import annotations

import pytest
from helpers.cli import run_npudure

from npudure.security import access as security
from npudure_workshop.lab.local import LocalCluster


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(boards=2, time_scale=5.0) as cl:
        yield cl


def admin(*args: str) -> tuple[int, str, str]:
    out = run_npudure("admin", *args, timeout_s=60)
    return out.returncode, out.stdout.strip(), out.stderr.strip()


def test_drain_wait_idle_undrain(cluster: LocalCluster) -> None:
    target, agent = cluster.address, cluster.agents["board1"].address
    assert admin("drain", "--target", target, "--node", "board1") == (0, "board1: DRAINING", "")
    assert (
        admin("wait-state", "--target", target, "--node", "board1", "--state", "DRAINING", "--timeout", "5")[
            0
        ]
        == 0
    )
    # The scheduler pushes the drain to the board's health, which proxyless clients follow.
    rc, out, err = admin("wait-idle", "--target", agent, "--reason", "drained", "--timeout", "20")
    assert rc == 0, err
    assert out.startswith(f"{agent}: idle (0 in flight, 0 queued") and "drained" in out
    assert admin("undrain", "--target", target, "--node", "board1")[0] == 0
    rc, out, err = admin("wait-state", "--target", target, "--node", "board1", "--timeout", "20")
    assert (rc, out) == (0, "board1: UP"), err


def test_a_wait_that_does_not_end_names_what_it_saw(cluster: LocalCluster) -> None:
    agent = cluster.agents["board2"].address
    rc, out, err = admin("wait-idle", "--target", agent, "--reason", "drained", "--timeout", "1")
    assert rc == 1 and out == ""
    assert err.startswith(f"npudure admin wait-idle: {agent}: not idle: still 0 in flight, 0 queued")
    assert "after 1 s" in err and "\n" not in err


def test_an_unknown_board_exits_3_naming_the_boards(cluster: LocalCluster) -> None:
    rc, _, err = admin("drain", "--target", cluster.address, "--node", "board9")
    assert rc == 3 and "no board named 'board9'" in err and "board1, board2" in err
    rc, _, err = admin("wait-state", "--target", cluster.address, "--node", "board9", "--timeout", "2")
    assert rc == 3 and "no board named board9" in err


def test_without_the_token_the_drain_is_refused(cluster: LocalCluster, monkeypatch, tmp_path) -> None:
    wrong = tmp_path / "token"
    wrong.write_text("not-the-fleet-token\n")
    wrong.chmod(0o600)
    monkeypatch.setenv(security.ENV_TOKEN, str(wrong))
    rc, _, err = admin("drain", "--target", cluster.address, "--node", "board1")
    assert rc == 1 and "PERMISSION_DENIED" in err and "admin call" in err and "Traceback" not in err
