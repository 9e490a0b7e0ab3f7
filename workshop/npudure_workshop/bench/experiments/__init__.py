"""The benchmark's experiments, one module per kind, and the registry the session, analysis and report
loop over (none of them branches on the kind). To add a kind: a module with an ``Experiment`` subclass,
one line below."""

from __future__ import annotations

from npudure_workshop.bench.experiments.base import Experiment, Plan, PlanContext
from npudure_workshop.bench.experiments.capacity import Capacity
from npudure_workshop.bench.experiments.hetero import Hetero
from npudure_workshop.bench.experiments.local import Local
from npudure_workshop.bench.experiments.openloop import OpenLoop
from npudure_workshop.bench.experiments.scaling import Scaling
from npudure_workshop.bench.experiments.sweep import Sweep

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
