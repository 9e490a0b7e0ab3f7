"""The soak's verdict on sampled RSS and fds: bounds, restarts, and a climb told from a plateau."""

from __future__ import annotations

import pytest

from npudure_workshop.faults.soak import Bounds, ProcSample, rss_slope_mib_per_min, table, verdict

MIB_KIB = 1024


def _series(rss_mib_at_minute, minutes: int = 60, pid: int = 7, fds: int = 20) -> list[ProcSample]:
    return [
        ProcSample(m * 60.0, "sched", pid, int(rss_mib_at_minute(m) * MIB_KIB), fds)
        for m in range(minutes + 1)
    ]


def test_a_steady_leak_keeps_its_slope_in_the_second_half() -> None:
    (v,) = verdict(_series(lambda m: 60 + 1.0 * m), warmup_s=60, bounds=Bounds(rss_growth_pct=200))
    assert v.slope_first_mib_min == pytest.approx(1.0, abs=0.01)
    assert v.slope_second_mib_min == pytest.approx(1.0, abs=0.01)


def test_a_plateau_has_a_flat_second_half() -> None:
    (v,) = verdict(_series(lambda m: 60 + min(m, 20) * 0.5), warmup_s=60, bounds=Bounds())
    assert v.slope_first_mib_min > 0.2
    assert v.slope_second_mib_min == pytest.approx(0.0, abs=0.01)
    assert v.passed, v.why


def test_growth_beyond_the_bounds_fails_with_the_reason() -> None:
    (v,) = verdict(_series(lambda m: 60 + 1.0 * m), warmup_s=60, bounds=Bounds())
    assert not v.passed
    assert any("RSS grew 59.0 MiB (bound 50 MiB)" in w for w in v.why), v.why


def test_a_restart_fails_the_process() -> None:
    samples = _series(lambda m: 60.0, minutes=4)
    samples[-1] = ProcSample(240.0, "sched", 8, 60 * MIB_KIB, 20)
    (v,) = verdict(samples, warmup_s=0, bounds=Bounds())
    assert not v.passed and any("restarted" in w for w in v.why)


def test_slope_needs_two_samples_and_the_table_shows_both_halves() -> None:
    assert rss_slope_mib_per_min(_series(lambda m: 1.0, minutes=0)) is None
    verdicts = verdict(_series(lambda m: 60 + min(m, 20) * 0.5), warmup_s=60, bounds=Bounds())
    text = table(verdicts)
    assert "MiB/min 2nd half" in text.splitlines()[0]
    assert "0.000" in text.splitlines()[2]
