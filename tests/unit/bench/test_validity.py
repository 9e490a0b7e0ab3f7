"""Each validity rule, triggered on purpose on hand-built run records (the live triggers are in
test_bench_cluster.py)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from helpers import run_records

from npudure_workshop.bench import validity

BOARDS = ["board1", "board2"]


def _meta() -> dict[str, Any]:
    return {
        "spec": {"boards": list(BOARDS)},
        "window_start_s": 1.0,
        "window_end_s": 5.0,
        "boot_ids_before": {"board1": "boot-a", "board2": "boot-b"},
        "boot_ids_after": {"board1": "boot-a", "board2": "boot-b"},
        "generator_cpu": {
            "loop_thread_fraction_of_core": 0.2,
            "process_fraction_of_core": 0.3,
            "cpu_count": 2,
        },
        "scheduler_cpu": {"status": "measured", "fraction_of_core_by_pid": {"123": 0.4}},
        "lease_problem": None,
        "cluster_served_before": 1000,
        "cluster_served_after": 1500,
        "responses_ok_total": 500,
        "schedule": {},
        "host_cpu_busy_fraction": 0.5,
    }


def _figures() -> dict[str, Any]:
    quarters = [
        {"quarter": q, "start_s": 1.0 + q - 1, "end_s": 1.0 + q, "samples_ok": 100, "boards": list(BOARDS)}
        for q in range(1, 5)
    ]
    return run_records.figures(BOARDS, quarters)


def _rows() -> list[dict[str, Any]]:
    return [
        {"t_s": str(t), "board": b, "state": "UP", "boot_id": {"board1": "boot-a", "board2": "boot-b"}[b]}
        for t in (0.0, 1.5, 2.5, 3.5, 4.5, 5.5)
        for b in BOARDS
    ]


def _check(
    meta: dict[str, Any] | None = None,
    figures: dict[str, Any] | None = None,
    rows: list[dict[str, Any]] | None = None,
) -> tuple[list[str], list[str]]:
    return validity.check(meta or _meta(), figures or _figures(), _rows() if rows is None else rows)


def _rules(reasons: list[str]) -> set[str]:
    return {r.split(":")[0] for r in reasons}


def test_a_clean_run_is_valid() -> None:
    reasons, warnings = _check()
    assert reasons == []
    assert warnings == []


def test_boot_id_change_in_telemetry_is_a_reboot() -> None:
    rows = _rows()
    for row in rows:
        if row["board"] == "board2" and float(row["t_s"]) >= 3.0:
            row["boot_id"] = "boot-NEW"
    reasons, _ = _check(rows=rows)
    assert _rules(reasons) == {"board_rebooted"}
    assert "board2" in reasons[0] and "boot-b -> boot-NEW" in reasons[0]


def test_boot_id_change_seen_only_after_the_run_is_a_reboot() -> None:
    meta = _meta()
    meta["boot_ids_after"]["board1"] = "boot-later"
    assert _rules(_check(meta=meta)[0]) == {"board_rebooted"}


def test_an_unanswered_boot_id_is_not_a_reboot() -> None:
    meta = _meta()
    meta["boot_ids_after"]["board1"] = None  # board did not answer the status call
    assert _check(meta=meta)[0] == []


def test_a_board_that_never_answered_invalidates() -> None:
    figures = _figures()
    figures["answered_boards"] = ["board1"]
    for q in figures["answered_by_quarter"]:
        q["boards"] = ["board1"]
    reasons, _ = _check(figures=figures)
    assert _rules(reasons) == {"boards_answered_differ"}
    assert any("never answered: board2" in r for r in reasons)


def test_a_board_disappearing_mid_run_invalidates() -> None:
    figures = _figures()
    figures["answered_by_quarter"][3]["boards"] = ["board1"]
    reasons, _ = _check(figures=figures)
    assert _rules(reasons) == {"boards_answered_differ"}
    assert "quarter 4" in reasons[0] and "board2 did not answer" in reasons[0]


def test_a_quarter_too_thin_to_judge_is_not_held_against_the_run() -> None:
    figures = _figures()
    figures["answered_by_quarter"][3].update(boards=["board1"], samples_ok=3)
    assert _check(figures=figures)[0] == []


def test_an_unasked_board_answering_invalidates() -> None:
    figures = _figures()
    figures["answered_boards"] = [*BOARDS, "board3"]
    reasons, _ = _check(figures=figures)
    assert any("answered but not asked: board3" in r for r in reasons)


def test_a_board_down_during_the_window_invalidates_but_not_outside_it() -> None:
    rows = _rows()
    rows[-1]["state"] = "DOWN"  # t=5.5, after the window
    assert _check(rows=rows)[0] == []
    rows[5]["state"] = "DOWN"  # t=2.5, board2
    reasons, _ = _check(rows=rows)
    assert _rules(reasons) == {"board_not_up"}
    assert "board2 DOWN" in reasons[0]


@pytest.mark.parametrize(("errors", "invalid"), [(4, False), (5, True)])
def test_error_rate_above_one_percent_invalidates(errors: int, invalid: bool) -> None:
    figures = _figures()
    figures.update(samples_ok=400, samples_error=errors, error_rate=errors / (400 + errors))
    reasons, _ = _check(figures=figures)
    assert (_rules(reasons) == {"error_rate"}) is invalid
    assert bool(reasons) is invalid


@pytest.mark.parametrize(("ok", "invalid"), [(99, True), (100, False)])
def test_fewer_than_100_samples_invalidates(ok: int, invalid: bool) -> None:
    figures = _figures()
    figures["samples_ok"] = ok
    reasons, _ = _check(figures=figures)
    assert ("too_few_samples" in _rules(reasons)) is invalid


def test_saturated_generator_loop_thread_invalidates() -> None:
    meta = _meta()
    meta["generator_cpu"]["loop_thread_fraction_of_core"] = 0.95
    reasons, _ = _check(meta=meta)
    assert _rules(reasons) == {"generator_saturated"}


def test_saturated_generator_process_invalidates() -> None:
    meta = _meta()
    meta["generator_cpu"].update(process_fraction_of_core=1.9, cpu_count=2)
    assert _rules(_check(meta=meta)[0]) == {"generator_saturated"}
    meta["generator_cpu"].update(process_fraction_of_core=1.5)  # busy, but below 90% of both cores
    assert _check(meta=meta)[0] == []


def test_saturated_scheduler_invalidates_and_unknown_is_said_not_passed() -> None:
    meta = _meta()
    meta["scheduler_cpu"]["fraction_of_core_by_pid"]["123"] = 0.97
    reasons, _ = _check(meta=meta)
    assert _rules(reasons) == {"scheduler_saturated"} and "pid 123" in reasons[0]
    meta["scheduler_cpu"] = {"status": "unknown", "reason": "the scheduler runs on another host"}
    reasons, warnings = _check(meta=meta)
    assert reasons == []
    assert any("scheduler CPU check unknown" in w and "another host" in w for w in warnings)


def test_lost_lease_invalidates() -> None:
    meta = _meta()
    meta["lease_problem"] = "lease renewal failed: UNAVAILABLE"
    assert _rules(_check(meta=meta)[0]) == {"lease"}


def test_foreign_load_invalidates() -> None:
    meta = _meta()
    meta["cluster_served_after"] = 1000 + 500 + 200  # 200 requests nobody in this harness sent
    reasons, _ = _check(meta=meta)
    assert _rules(reasons) == {"foreign_load"} and "200 more requests" in reasons[0]
    meta["cluster_served_after"] = 1000 + 500 + 5  # within slack
    assert _check(meta=meta)[0] == []


def test_open_loop_schedule_not_kept_invalidates_and_late_sends_warn() -> None:
    meta = _meta()
    meta["schedule"] = {
        "rate_not_offered": True,
        "sent_fraction_of_schedule": 0.8,
        "generator_behind_schedule": True,
    }
    assert _rules(_check(meta=meta)[0]) == {"rate_not_offered"}
    meta["schedule"] = {"rate_not_offered": False, "generator_behind_schedule": True, "send_lag_p99_ms": 25.0}
    reasons, warnings = _check(meta=meta)
    assert reasons == [] and any("late" in w for w in warnings)


def test_no_telemetry_inside_the_window_is_warned() -> None:
    rows = [r for r in _rows() if float(r["t_s"]) in (0.0, 5.5)]
    reasons, warnings = _check(rows=rows)
    assert reasons == []
    assert any("no telemetry" in w for w in warnings)


def test_several_problems_are_all_reported() -> None:
    meta, figures = copy.deepcopy(_meta()), _figures()
    meta["lease_problem"] = "not held"
    figures.update(samples_ok=50, samples_error=50, error_rate=0.5)
    assert _rules(_check(meta=meta, figures=figures)[0]) == {"lease", "too_few_samples", "error_rate"}
