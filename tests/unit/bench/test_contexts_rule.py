"""The context sweep's numbers: the counts measured, the load at each, and the operating point rule
(the lowest count within 2% of peak throughput)."""

from __future__ import annotations

import argparse

import pytest

from npudure_workshop.bench.contexts_rule import (
    DEFAULT_CONTEXTS,
    SWEEP,
    concurrency_for,
    context_counts,
    operating_point,
    sweep_counts,
)


def test_the_lowest_count_within_two_percent_of_the_peak_is_the_operating_point() -> None:
    # The reference's RK3576 curve went on rising to 8; here 16 adds 1.5% over 8: 8 is the point.
    op = operating_point({1: 16.7, 2: 36.2, 4: 52.4, 8: 72.9, 16: 74.0})
    assert op is not None
    assert (op.contexts, op.peak_contexts) == (8, 16)
    assert op.fraction_of_peak == pytest.approx(72.9 / 74.0)


def test_just_outside_two_percent_is_not_enough() -> None:
    op = operating_point({4: 97.9, 8: 100.0})
    assert op is not None and op.contexts == 8
    op = operating_point({4: 98.0, 8: 100.0})
    assert op is not None and op.contexts == 4


def test_a_peak_at_a_low_count_wins_over_a_decline() -> None:
    op = operating_point({1: 50.0, 2: 80.0, 4: 79.0, 8: 70.0})
    assert op is not None and (op.contexts, op.peak_contexts) == (2, 2)


def test_counts_without_a_valid_figure_are_left_out() -> None:
    op = operating_point({1: None, 2: 40.0, 4: None})
    assert op is not None and op.contexts == 2
    assert operating_point({1: None, 2: None}) is None
    assert operating_point({}) is None


def test_the_default_count_is_always_measured_once() -> None:
    assert sweep_counts(None) == sorted({*SWEEP, DEFAULT_CONTEXTS})
    assert sweep_counts([4, 1, 2, 1]) == [1, 2, 4, DEFAULT_CONTEXTS]
    assert sweep_counts([16, 8]) == [8, 16]


def test_closed_loop_at_twice_the_contexts_by_default() -> None:
    assert [concurrency_for(n) for n in (1, 2, 8)] == [2, 4, 16]
    assert concurrency_for(3, 1.5) == 5
    assert concurrency_for(1, 0.1) == 1


@pytest.mark.parametrize(
    "text, says",
    [
        ("0,2", "from 1 to 64 (got 0)"),
        ("1,65", "(got 65)"),
        ("1,x", "comma-separated whole numbers"),
        (",", "at least one"),
    ],
)
def test_bad_count_lists_are_refused(text: str, says: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as exc:
        context_counts(text)
    assert says in str(exc.value)
