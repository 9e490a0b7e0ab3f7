"""Admin inputs are bounded before they are acted on."""

from __future__ import annotations

import math

import pytest

from npudure.security import admin_inputs as inputs


def test_lease_ttl_is_finite_positive_and_bounded() -> None:
    assert inputs.lease("bench", 0) == inputs.DEFAULT_LEASE_S
    assert inputs.lease("bench", 5) == 5
    for ttl in (math.inf, -math.inf, math.nan, -1, inputs.MAX_LEASE_S + 1):
        with pytest.raises(inputs.BadInput, match="ttl_s"):
            inputs.lease("bench", ttl)


def test_names_are_bounded_and_printable() -> None:
    with pytest.raises(inputs.BadInput, match="at most 128"):
        inputs.lease("x" * 129, 5)
    with pytest.raises(inputs.BadInput, match="holder name"):
        inputs.lease("", 5)
    with pytest.raises(inputs.BadInput, match="control characters"):
        inputs.node_name("board1\n")
    with pytest.raises(inputs.BadInput, match="at most 1024"):
        inputs.node_names(["b"] * 1025)
    assert inputs.node_names(["board1", "board2"]) == ["board1", "board2"]


def test_cpu_caps_within_the_board_range() -> None:
    assert inputs.cpu_cap(0) == 0 and inputs.cpu_cap(816) == 816
    for mhz in (1, 99, 5001, -5):
        with pytest.raises(inputs.BadInput, match="out of range"):
            inputs.cpu_cap(mhz)
