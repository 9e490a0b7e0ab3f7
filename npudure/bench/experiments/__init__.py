"""The benchmark's experiments, one module per kind, and the registry the session, analysis and report
loop over (none of them branches on the kind). To add a kind: a module with an ``Experiment`` subclass,
one line below."""

from __future__ import annotations

from npudure.bench.experiments.base import Experiment, Plan, PlanContext
from npudure.bench.experiments.capacity import Capacity
from npudure.bench.experiments.hetero import Hetero
from npudure.bench.experiments.local import Local
from npudure.bench.experiments.openloop import OpenLoop
from npudure.bench.experiments.scaling import Scaling
from npudure.bench.experiments.sweep import Sweep

REGISTRY: dict[str, Experiment] = {
    e.kind: e for e in (Sweep(), Scaling(), Hetero(), OpenLoop(), Capacity(), Local())
}

__all__ = ["REGISTRY", "Experiment", "Plan", "PlanContext", "get", "kinds"]


def kinds() -> tuple[str, ...]:
    return tuple(REGISTRY)


def get(kind: str) -> Experiment:
    try:
        return REGISTRY[kind]
    except KeyError:
        raise ValueError(f"unknown experiment kind {kind!r}; known: {', '.join(REGISTRY)}") from None
