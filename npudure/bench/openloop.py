"""Open loop: requests at rate λ (constant or Poisson, fixed seed), latency from the intended send time.

A closed loop slows down when the cluster does and so never sees a queue build; an open loop keeps
sending on schedule, as cameras do. Lateness of the generator itself is measured and flagged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from npudure.bench.stats import alternating_order

if TYPE_CHECKING:
    from npudure.bench.session import BenchSession


def run_openloop(
    session: BenchSession,
    rates: list[float],
    arrival: str = "poisson",
    seed: int = 0,
    repetitions: int = 1,
    boards: list[str] | None = None,
) -> dict[str, Any]:
    from npudure.bench.session import RunSpec

    if not rates or any(r <= 0 for r in rates):
        raise ValueError("open-loop rates must be positive, e.g. 20,40,60")
    chosen = tuple(boards or session.boards)
    series = session.series_name("openloop")
    ordered = sorted(set(rates))
    session.progress.experiment(
        f"{series} ({arrival} arrivals at {ordered} inf/s)", len(ordered) * repetitions
    )
    for rep in range(repetitions):
        for rate in alternating_order(ordered, rep):
            session.execute(
                RunSpec(
                    run_id=f"{series}-rate{rate:g}-r{rep}",
                    series=series,
                    experiment="openloop",
                    sequence=session.next_sequence(),
                    repetition=rep,
                    boards=chosen,
                    mode="open",
                    rate=float(rate),
                    arrival=arrival,
                    seed=seed + rep,
                )
            )
    return session.aggregate(series)
