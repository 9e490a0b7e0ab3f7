"""``npudure bench``: measure a running cluster — saturation, scaling, heterogeneity, capacity, local
vs cluster, open loop — through the scheduler or proxyless.

Python API: ``BenchSession`` (see npudure_workshop/bench/session.py) and ``BenchSettings``; each
experiment kind is a module of npudure_workshop/bench/experiments/; ``recompute`` checks a result
folder's figures against its raw samples. Imports are lazy so ``npudure bench --help`` is quick.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from npudure_workshop.bench.session import BenchSession, BenchSettings, RunSpec

__all__ = ["BenchSession", "BenchSettings", "RunSpec"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from npudure_workshop.bench import session

        return getattr(session, name)
    raise AttributeError(name)
