"""Which boards hold which models (npudure.scheduler.placement), on plain stand-ins for boards."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from npudure.scheduler import placement


@dataclass
class B:
    model_names: tuple[str, ...] | None


def test_the_clusters_default_is_the_first_known_boards_default() -> None:
    assert placement.default_model([B(None), B(("plates", "general")), B(("general",))]) == "plates"
    assert placement.default_model([B(None)]) is None


def test_served_lists_the_default_first_then_in_board_order() -> None:
    assert placement.served([B(("general", "plates")), B(("faces", "general"))]) == [
        "general",
        "plates",
        "faces",
    ]


def test_a_board_that_reports_no_models_holds_the_default_only() -> None:
    old, new = B(None), B(("general", "plates"))
    assert placement.holds(old, "", "general") and placement.holds(old, "general", "general")
    assert not placement.holds(old, "plates", "general")
    assert placement.holds(new, "plates", "general")
    # A shelf of such boards only: the default is yolov8n, as a single `model:` is named.
    assert placement.holds(old, "yolov8n", None) and not placement.holds(old, "general", None)
    placement.check_served([old], "yolov8n")


def test_no_model_goes_only_where_it_is_the_boards_own_default() -> None:
    assert placement.holds(B(("general", "plates")), "", "general")
    assert not placement.holds(B(("plates", "general")), "", "general")  # would answer with plates


def test_an_unknown_name_is_refused_with_the_list() -> None:
    boards = [B(("general", "plates"))]
    placement.check_served(boards, "plates")
    placement.check_served(boards, "")
    with pytest.raises(
        placement.UnknownModel, match=r"^no board serves model 'x'; models served: general, plates$"
    ):
        placement.check_served(boards, "x")
    with pytest.raises(placement.UnknownModel, match="none reported yet"):
        placement.check_served([B(None)], "x")
