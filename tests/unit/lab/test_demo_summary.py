"""The demo's summary prints "invalid" for an invalid run, never its figures; and the time-scale pick."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from npudure_workshop.lab import demo_summary, timescale

LAG = "emulation_lag: the emulated boards fell behind their model by 40% (board2 40%; bound 5%): ..."


def _point(n: int, thr: float, p99: float, invalid: list[str] | None = None) -> dict[str, Any]:
    return {
        "conditions": {
            "backend": "EMULATED NPU (sim backend)",
            "policy": "least_inflight",
            "per_board_concurrency": 4,
            "connections_per_board": 2,
            "encoding": "raw",
            "payload_bytes_mean": 1228800.0,
            "window_s_mean": 3.0,
            "repetitions_valid": 0 if invalid else 2,
            "repetitions_total": 2,
        },
        "invalid_runs": {f"scaling-n{n}-r0": invalid, f"scaling-n{n}-r1": invalid} if invalid else {},
        "throughput_mean_inf_per_s": thr,
        "throughput_per_run_inf_per_s": [thr * 0.998, thr * 1.002],
        "efficiency": thr / (n * 60.0),
        "latency_pooled_ms": {"p99": p99},
        "boards": {f"board{i + 1}": {"latency_mean_ms": 30.0 + 3 * i} for i in range(n)},
    }


def _summary(*points: dict[str, Any]) -> dict[str, Any]:
    by_n = {str(i + 1): p for i, p in enumerate(points)}
    return {"experiments": {"scaling": {"kind": "scaling", "points": by_n}}}


def test_a_valid_run_prints_its_figures_with_conditions() -> None:
    lines = demo_summary.summary_lines(_summary(_point(1, 60.0, 40.0), _point(2, 118.8, 42.0)), 2.5)
    assert "time scale 2.5" in lines[0] and "least_inflight" in lines[0] and "EMULATED" in lines[0]
    assert "efficiency 99.0%" in lines[2]
    assert "p99 growth +5.0%" in lines[2]
    assert "spread 1.10x" in lines[2]
    assert not any("invalid" in line for line in lines)


def test_an_invalid_point_prints_invalid_and_not_its_number() -> None:
    lines = demo_summary.summary_lines(_summary(_point(1, 60.0, 40.0), _point(2, 70.0, 90.0, [LAG])))
    two = lines[2]
    assert "invalid" in two and "emulation_lag" in two
    assert "70.0" not in two and "efficiency" not in two


def test_an_invalid_one_board_point_invalidates_every_efficiency() -> None:
    lines = demo_summary.summary_lines(_summary(_point(1, 60.0, 40.0, [LAG]), _point(2, 118.8, 42.0)))
    assert lines[1].strip().startswith("1 board(s): invalid")
    assert "efficiency invalid" in lines[2] and "99.0%" not in lines[2]


def test_cli_prints_the_summary_and_refuses_a_missing_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(_summary(_point(1, 60.0, 40.0, [LAG]))))
    assert demo_summary.main([str(path)]) == 0
    assert "invalid" in capsys.readouterr().out
    assert demo_summary.main([str(tmp_path / "absent.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("demo summary: cannot read") and "Traceback" not in err


def test_time_scale_keeps_the_fleet_within_half_the_host() -> None:
    for boards, cores in ((1, 2), (3, 2), (8, 2), (16, 2), (16, 64)):
        scale, why = timescale.pick(boards, cores)
        demand = boards * 161.5 / scale * 5.0 / 1000  # seed: 161.5 inf/s per board at scale 1
        assert scale >= 1.0
        assert demand <= 0.5 * cores + 1e-9 or scale == 1.0, (boards, cores)
        assert f"time scale {scale:g}" in why
    assert timescale.pick(16, 2)[0] > timescale.pick(3, 2)[0]


def _three(thr3: float, p99_3: float) -> dict[str, Any]:
    return _summary(_point(1, 60.0, 40.0), _point(2, 120.0, 40.0), _point(3, thr3, p99_3))


def test_the_goals_at_three_boards_are_met() -> None:
    lines = demo_summary.summary_lines(_three(179.8, 41.0))  # 99.9%, +2.5%
    assert "  goal at 3 boards: efficiency >= 99.5%: met" in lines
    assert "  goal at 3 boards: p99 growth 1->3 <= 5%: met" in lines


def test_a_missed_goal_says_so_with_the_repetitions_range() -> None:
    lines = demo_summary.summary_lines(_three(178.2, 43.0))  # 99.0%, +7.5%
    eff = next(line for line in lines if "goal at 3 boards: efficiency" in line)
    assert "NOT met (99.0%; repetitions 98.8%..99.2%)" in eff
    assert any("p99 growth 1->3 <= 5%: NOT met (+7.5%)" in line for line in lines)


def test_no_goal_is_claimed_for_an_invalid_point() -> None:
    summary = _summary(_point(1, 60.0, 40.0), _point(2, 120.0, 40.0), _point(3, 179.8, 41.0, [LAG]))
    assert not any("goal" in line for line in demo_summary.summary_lines(summary))
