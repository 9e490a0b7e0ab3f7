"""Which boards hold which models: the scheduler's view, from the boards' own reports.

A board says what it serves in ``NodeStatus.models`` (polled at start-up, before any request, and every
``status_interval_s``). Until it has, the scheduler config's ``models`` for that board stand in. A
board known by neither (an agent older than multi-model boards) serves one model under any name: it
is taken to hold the cluster's default model only, called ``yolov8n`` (as a single ``model:`` is)
while no board names a default.

The cluster's default model (what a request naming none gets) is the default of the first board, in
board order, that has one. A request naming none goes only to boards whose own default it is: a board
whose default is another model would answer with that model.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from npudure.config import DEFAULT_MODEL_NAME


class Holder(Protocol):
    """What placement reads about a board (npudure.scheduler.boards.Board)."""

    @property
    def model_names(self) -> tuple[str, ...] | None: ...


class UnknownModel(LookupError):
    """No board serves the model a request named (NOT_FOUND, listing the served ones)."""


def default_model(boards: Iterable[Holder]) -> str | None:
    """The cluster's default: the first board's default (its first model), None while none is known."""
    return next((names[0] for b in boards if (names := b.model_names)), None)


def served(boards: Iterable[Holder]) -> list[str]:
    """Every model some board serves, the cluster's default first, then in board order."""
    boards = list(boards)
    names: dict[str, None] = {}
    default = default_model(boards)
    if default is not None:
        names[default] = None
    for board in boards:
        names.update(dict.fromkeys(board.model_names or ()))
    return list(names)


def holds(board: Holder, model: str, default: str | None) -> bool:
    """Whether ``board`` answers a request naming ``model`` ("" = the default) with that model."""
    names = board.model_names
    if names is None:  # serves its single model whatever is asked: only as the default
        return not model or model == (default or DEFAULT_MODEL_NAME)
    if not model:
        return default is None or names[0] == default
    return model in names


def check_served(boards: Sequence[Holder], model: str) -> None:
    """Raise UnknownModel when no board serves ``model`` (the default always passes)."""
    if not model:
        return
    default = default_model(boards)
    if any(holds(b, model, default) for b in boards):
        return
    names = served(boards)
    listed = ", ".join(names) if names else "none reported yet"
    raise UnknownModel(f"no board serves model {model!r}; models served: {listed}")
