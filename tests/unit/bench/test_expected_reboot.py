"""A planned reboot (a fault suite's) is declared, not failed: validity notes what happened to the
declared board as ``expected_reboot`` and keeps the run valid, while every other board is still held
to every rule. Hand-built run records, as in test_bench_validity.py."""

from __future__ import annotations

from typing import Any

from helpers import run_records

from npudure_workshop.bench import validity

BOARDS = ["board1", "board2"]
BOOT = {"board1": "boot-a", "board2": "boot-b"}


def _meta(expect: list[str]) -> dict[str, Any]:
    return {
        "spec": {"boards": list(BOARDS), "expect_reboot": expect},
        "window_start_s": 1.0,
        "window_end_s": 5.0,
        "boot_ids_before": dict(BOOT),
        "boot_ids_after": {**BOOT, "board2": "boot-b2"},  # board2 came back with a new boot id
        "generator_cpu": {
            "loop_thread_fraction_of_core": 0.2,
            "process_fraction_of_core": 0.3,
            "cpu_count": 2,
        },
        "scheduler_cpu": {"status": "measured", "fraction_of_core_by_pid": {"1": 0.4}},
        "cluster_served_before": 0,
        "cluster_served_after": 400,
        "responses_ok_total": 400,
    }


def _figures() -> dict[str, Any]:
    # board2 answered in quarters 1 and 4 only: it was away in between.
    quarters = [
        {"quarter": q, "start_s": float(q), "end_s": q + 1.0, "samples_ok": 100, "boards": boards}
        for q, boards in ((1, BOARDS), (2, ["board1"]), (3, ["board1"]), (4, BOARDS))
    ]
    return run_records.figures(BOARDS, quarters)


def _rows() -> list[dict[str, Any]]:
    state = {2.5: "DOWN", 3.5: "DOWN"}
    return [
        {
            "t_s": str(t),
            "board": b,
            "state": state.get(t, "UP") if b == "board2" else "UP",
            "boot_id": ("boot-b2" if t > 3 else "boot-b") if b == "board2" else BOOT[b],
        }
        for t in (0.0, 1.5, 2.5, 3.5, 4.5, 5.5)
        for b in BOARDS
    ]


def _rules(reasons: list[str]) -> set[str]:
    return {r.split(":")[0] for r in reasons}


def test_the_same_reboot_undeclared_is_invalid() -> None:
    reasons, _ = validity.check(_meta([]), _figures(), _rows())
    assert _rules(reasons) == {"board_rebooted", "boards_answered_differ", "board_not_up"}


def test_a_declared_reboot_is_noted_and_the_run_stays_valid() -> None:
    reasons, warnings = validity.check(_meta(["board2"]), _figures(), _rows())
    assert reasons == []
    noted = [w for w in warnings if w.startswith("expected_reboot:")]
    assert any("boot-b -> boot-b2" in w for w in noted)
    assert any("DOWN" in w for w in noted)
    assert any("board2 did not answer in part of the window" in w for w in noted)


def test_declaring_one_board_does_not_excuse_another() -> None:
    rows = _rows()
    for row in rows:
        if row["board"] == "board1" and float(row["t_s"]) > 3:
            row["boot_id"] = "boot-a2"  # board1 rebooted too, undeclared
    reasons, _ = validity.check(_meta(["board2"]), _figures(), rows)
    assert reasons and all(r.startswith("board_rebooted: board1") for r in reasons)


def test_a_declared_board_that_did_not_reboot_leaves_no_note() -> None:
    meta = _meta(["board2"])
    meta["boot_ids_after"] = dict(BOOT)
    figures = _figures()
    for q in figures["answered_by_quarter"]:
        q["boards"] = list(BOARDS)
    rows = [{**r, "state": "UP", "boot_id": BOOT[r["board"]]} for r in _rows()]
    reasons, warnings = validity.check(meta, figures, rows)
    assert reasons == [] and not [w for w in warnings if w.startswith("expected_reboot")]


def test_errors_during_a_declared_reboot_still_count() -> None:
    figures = {**_figures(), "samples_error": 40, "error_rate": 40 / 440}
    reasons, _ = validity.check(_meta(["board2"]), figures, _rows())
    assert _rules(reasons) == {"error_rate"}
