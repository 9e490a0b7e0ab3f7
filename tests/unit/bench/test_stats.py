"""The benchmark's arithmetic on synthetic data with answers worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from npudure_workshop.bench import stats
from npudure_workshop.bench.load import arrival_offsets, longest_window_s, open_loop_window


# ------------------------------------------------------------------------------------ operating point
def test_operating_point_is_lowest_concurrency_reaching_98_percent_of_peak() -> None:
    curve = {1: 50.0, 2: 90.0, 4: 98.5, 8: 100.0, 16: 99.0}
    op = stats.operating_point(curve)
    assert op is not None
    assert op.concurrency == 4  # 98.5 >= 0.98 * 100
    assert op.peak_concurrency == 8
    assert op.peak_throughput == 100.0
    assert op.warnings == ()


def test_operating_point_just_below_the_threshold_moves_up() -> None:
    op = stats.operating_point({1: 50.0, 2: 90.0, 4: 97.9, 8: 100.0, 16: 99.0})
    assert op is not None and op.concurrency == 8


def test_operating_point_warns_when_peak_is_at_the_top_of_the_sweep() -> None:
    op = stats.operating_point({1: 40.0, 2: 70.0, 4: 100.0})
    assert op is not None and op.concurrency == 4
    assert any("largest concurrency" in w for w in op.warnings)


def test_operating_point_warns_when_the_knee_may_be_below_the_sweep() -> None:
    op = stats.operating_point({4: 99.0, 8: 100.0, 16: 99.5})
    assert op is not None and op.concurrency == 4
    assert any("below the sweep" in w for w in op.warnings)
    assert not any("largest" in w for w in op.warnings)


def test_operating_point_ties_at_peak_go_to_the_lower_concurrency() -> None:
    op = stats.operating_point({2: 100.0, 4: 100.0, 8: 100.0})
    assert op is not None and op.peak_concurrency == 2 and op.concurrency == 2


def test_operating_point_of_nothing_is_none() -> None:
    assert stats.operating_point({}) is None


# ------------------------------------------------------------------------------------ efficiency
def test_efficiency_is_throughput_over_n_times_single_board() -> None:
    # The reference's headline: 112.9 -> 338.4 inf/s on 3 boards.
    assert stats.efficiency(338.4, 3, 112.9) == pytest.approx(338.4 / 338.7)
    assert stats.efficiency(229.0, 2, 112.9) == pytest.approx(229.0 / 225.8)
    assert stats.efficiency(50.0, 1, 50.0) == 1.0


@pytest.mark.parametrize(
    ("xn", "n", "x1"), [(None, 2, 10.0), (20.0, 2, None), (20.0, 2, 0.0), (20.0, 0, 10.0)]
)
def test_efficiency_unknown_inputs_give_none(xn: float | None, n: int, x1: float | None) -> None:
    assert stats.efficiency(xn, n, x1) is None


# ------------------------------------------------------------------------------------ percentiles
def test_latency_stats_known_values() -> None:
    s = stats.latency_stats(np.arange(1, 101, dtype=float))
    # Linear interpolation between closest ranks: position q/100 * (n - 1).
    assert s["p50"] == pytest.approx(50.5)
    assert s["p95"] == pytest.approx(95.05)
    assert s["p99"] == pytest.approx(99.01)
    assert s["p99_9"] == pytest.approx(99.901)
    assert s["max"] == 100.0
    assert s["mean"] == pytest.approx(50.5)


def test_pooled_percentiles_differ_from_the_mean_of_run_percentiles() -> None:
    fast = np.arange(1, 101, dtype=float)  # 100 samples, p50 50.5, max 100
    slow = np.full(300, 1000.0)  # 300 samples, all 1000
    pooled = stats.pooled_latency_stats([fast, slow])
    mean_of_runs = stats.mean_of_run_stats([fast, slow])
    # Pooled: 400 samples, 300 of them 1000 -> the median is 1000.
    assert pooled["p50"] == 1000.0
    assert pooled["max"] == 1000.0
    assert pooled["mean"] == pytest.approx((5050 + 300_000) / 400)
    # Mean of runs: (50.5 + 1000) / 2, blind to the slow run holding 3/4 of the requests.
    assert mean_of_runs["p50"] == pytest.approx(525.25)
    assert mean_of_runs["max"] == pytest.approx(550.0)


def test_pooled_tail_is_not_diluted_by_averaging() -> None:
    spiky = np.array([10.0] * 99 + [1000.0])
    calm = np.full(100, 10.0)
    pooled = stats.pooled_latency_stats([spiky, calm])
    mean_of_runs = stats.mean_of_run_stats([spiky, calm])
    assert pooled["max"] == 1000.0
    assert mean_of_runs["max"] == 505.0
    # 200 sorted samples: position 0.999 * 199 = 198.801 between 10 (index 198) and 1000 (index 199).
    assert pooled["p99_9"] == pytest.approx(10 + 0.801 * 990)


def test_empty_latencies_give_none_not_zero() -> None:
    assert all(v is None for v in stats.latency_stats(np.empty(0)).values())
    assert all(v is None for v in stats.pooled_latency_stats([]).values())
    assert all(v is None for v in stats.mean_of_run_stats([np.empty(0)]).values())


def test_mean_std_uses_sample_standard_deviation() -> None:
    mean, std = stats.mean_std([10.0, 12.0, 14.0])
    assert mean == 12.0 and std == pytest.approx(2.0)
    assert stats.mean_std([5.0]) == (5.0, 0.0)
    assert stats.mean_std([]) == (None, None)


# ------------------------------------------------------------------------------------ spread, order
def test_spread_is_slowest_over_fastest() -> None:
    ratio, slowest, fastest = stats.spread({"a": 100.0, "b": 133.0, "c": 110.0})
    assert ratio == pytest.approx(1.33) and slowest == "b" and fastest == "a"
    assert stats.spread({"a": 100.0}) == (None, None, None)
    assert stats.spread({"a": 100.0, "b": None}) == (None, None, None)  # type: ignore[dict-item]


def test_alternating_order_reverses_on_odd_repetitions() -> None:
    assert stats.alternating_order([1, 2, 4], 0) == [1, 2, 4]
    assert stats.alternating_order([1, 2, 4], 1) == [4, 2, 1]
    assert stats.alternating_order([1, 2, 4], 2) == [1, 2, 4]


def test_alternating_repetitions_yields_every_item_of_every_repetition_in_alternating_order() -> None:
    assert list(stats.alternating_repetitions(["a", "b"], 3)) == [
        (0, "a"),
        (0, "b"),
        (1, "b"),
        (1, "a"),
        (2, "a"),
        (2, "b"),
    ]
    assert list(stats.alternating_repetitions(["a"], 0)) == []


# ------------------------------------------------------------------------------------ arrivals
def test_constant_arrivals_are_evenly_spaced() -> None:
    offsets = arrival_offsets(10.0, 1.0, "constant", seed=0)
    assert offsets == pytest.approx([i / 10 for i in range(10)])


def test_poisson_arrivals_are_reproducible_from_the_seed() -> None:
    a = arrival_offsets(200.0, 50.0, "poisson", seed=7)
    b = arrival_offsets(200.0, 50.0, "poisson", seed=7)
    c = arrival_offsets(200.0, 50.0, "poisson", seed=8)
    assert np.array_equal(a, b)
    assert not np.array_equal(a[:100], c[:100])
    assert np.all(np.diff(a) > 0) and a[0] >= 0 and a[-1] < 50.0
    gaps = np.diff(a)
    # 10,000 exponential gaps of mean 5 ms: mean within 3%, coefficient of variation near 1.
    assert gaps.mean() == pytest.approx(1 / 200, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.05)


def test_unknown_arrival_process_is_refused() -> None:
    with pytest.raises(ValueError, match="constant or poisson"):
        arrival_offsets(10.0, 1.0, "bursty", seed=0)


def test_open_loop_window_extends_until_min_samples_are_scheduled() -> None:
    offsets, end = open_loop_window(10.0, 0.5, 1.0, "poisson", seed=3, min_samples=100)
    inside = offsets[(offsets >= 0.5) & (offsets < end)]
    assert inside.size == 100 and end > 1.5  # 10/s needs ~10 s for 100 requests
    assert offsets.max() < end
    # A longer span extends the same Poisson schedule (the prefix does not change).
    short = arrival_offsets(10.0, 5.0, "poisson", seed=3)
    assert np.array_equal(offsets[: short.size], short)
    # When duration alone gives enough requests, the window is exactly the duration.
    offsets, end = open_loop_window(100.0, 0.5, 2.0, "constant", seed=0, min_samples=100)
    assert end == 2.5 and offsets.size == 250


def test_an_open_loop_window_too_slow_for_its_samples_stops_at_the_longest_window() -> None:
    # 0.0001/s would need ~a million seconds for 100 requests: the window stops where a closed loop's
    # would (10 windows + 60 s), or at --max-duration, with what it has (the run is then invalid).
    offsets, end = open_loop_window(0.0001, 1.0, 0.5, "poisson", seed=0, min_samples=100)
    assert end == 1.0 + longest_window_s(0.5, None) == 66.0
    assert offsets.size < 100 and (offsets < end).all()
    offsets, end = open_loop_window(0.0001, 1.0, 0.5, "constant", seed=0, min_samples=100, max_duration_s=2.0)
    assert end == 3.0 and offsets.tolist() == [0.0]
    # An extension is cut at --max-duration too: 10/s needs ~10 s for 100 requests, 4 s are allowed.
    offsets, end = open_loop_window(10.0, 0.5, 1.0, "constant", seed=0, min_samples=100, max_duration_s=4.0)
    assert end == 4.5 and offsets.size == 45
    # A --max-duration shorter than the window shortens it, as in the closed loop.
    assert open_loop_window(100.0, 0.5, 2.0, "constant", seed=0, min_samples=0, max_duration_s=1.0)[1] == 1.5
