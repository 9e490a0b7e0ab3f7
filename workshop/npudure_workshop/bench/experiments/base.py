"""The one interface every benchmark experiment implements.

An experiment plans its runs (a list of ``RunSpec``; the session executes them, knowing nothing of
the kind), aggregates the runs of one series from raw files, and presents the aggregate: CSV tables,
report markdown, plots and terminal summary lines. Nothing here talks to a cluster.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from npudure_workshop.bench.groups import point_tables
from npudure_workshop.bench.runs import RunData
from npudure_workshop.bench.spec import RunSpec

Rows = list[dict[str, Any]]


@dataclass(frozen=True)
class PlanContext:
    """What an experiment may know when it plans: the boards it may use and its series name."""

    boards: tuple[str, ...]
    series: str
    via: str = "scheduler"  # how the load reaches the boards (RunSpec.via)


def require_active(boards: Sequence[str], board: str | None, option: str) -> None:
    """Refuse a board named by ``option`` on the command line that is not one of the active ``boards``."""
    if board is not None and board not in boards:
        names = ", ".join(boards) or "none"
        raise ValueError(f"{option} {board!r} is not an active board; boards are: {names}")


@dataclass
class Plan:
    description: str  # shown when the experiment starts
    specs: list[RunSpec] = field(default_factory=list)  # in execution order; sequence set on execution


class Experiment(ABC):
    kind: ClassVar[str]

    @abstractmethod
    def plan(self, ctx: PlanContext) -> Plan:
        """The runs, in order. Raises ValueError (in the user's terms) for parameters that cannot work.
        Each experiment adds its own keyword parameters, all with defaults (the session passes the
        series' parameters by name)."""

    @abstractmethod
    def aggregate(self, runs: Sequence[RunData]) -> dict[str, Any]:
        """summary.json's entry for one series; has ``kind`` and ``warnings``."""

    @abstractmethod
    def tables(self, name: str, agg: dict[str, Any]) -> dict[str, Rows]:
        """CSV rows by file name; file names carry the series name."""

    @abstractmethod
    def markdown(self, name: str, agg: dict[str, Any]) -> list[str]:
        """report.md's section for one series."""

    @abstractmethod
    def summary_lines(self, name: str, agg: dict[str, Any]) -> list[str]:
        """The terminal summary's lines for one series."""

    def spec(
        self, ctx: PlanContext, run_id: str, repetition: int, boards: Sequence[str], **fields: Any
    ) -> RunSpec:
        """A RunSpec of this experiment's series; the session numbers it when it executes it."""
        return RunSpec(
            run_id=run_id,
            series=ctx.series,
            experiment=self.kind,
            sequence=0,
            repetition=repetition,
            boards=tuple(boards),
            **{"via": ctx.via, **fields},
        )

    def closed_spec(
        self,
        ctx: PlanContext,
        run_id: str,
        repetition: int,
        boards: Sequence[str],
        per_board: int,
        **fields: Any,
    ) -> RunSpec:
        """A closed-loop RunSpec at ``per_board`` outstanding requests per board: the total is per-board
        × boards, so each board sees the same load whatever the number of boards in the run."""
        return self.spec(
            ctx,
            run_id,
            repetition,
            boards,
            concurrency=per_board * len(boards),
            per_board_concurrency=per_board,
            **fields,
        )

    def plots(self, plt: Any, folder: Path, name: str, agg: dict[str, Any], runs: Sequence[RunData]) -> None:
        """PNG files in ``folder`` (matplotlib's pyplot as ``plt``); none by default."""
        return None


class PointExperiment(Experiment):
    """The skeleton of an experiment whose aggregate is ``points`` keyed by one number (the sweep's
    per-board concurrency, the scaling's board count, the open loop's rate): its CSV tables are the
    shared group, per-board and per-stage columns of each point, then the experiment's own columns."""

    point_key: ClassVar[str]  # the CSV column of the point's number
    point_type: ClassVar[type[int] | type[float]]  # the points' keys are strings in summary.json

    def point_columns(self, g: dict[str, Any]) -> dict[str, Any]:
        """The experiment's own CSV columns of one point's aggregate (after the shared ones)."""
        return {}

    def tables(self, name: str, agg: dict[str, Any]) -> dict[str, Rows]:
        return point_tables(name, agg, self.point_key, self.point_type, self.point_columns)
