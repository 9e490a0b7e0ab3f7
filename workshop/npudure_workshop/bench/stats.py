"""The arithmetic of a benchmark: percentiles, efficiency, the operating point, spread.

Pure functions over numpy arrays, so every figure in a report can be recomputed from raw samples
(``npudure bench recompute``). Two rules from the reference's own admitted mistakes:

* Percentiles are computed over the POOLED samples of all repetitions. The mean of per-run
  percentiles is also given (it is what the reference reported), but it dilutes each run's worst
  moments and reads low in the tail — never cite it as "the p99 of the system".
* The operating point is the LOWEST concurrency reaching 98% of peak throughput (99% was inside
  run-to-run noise); configurations are compared there, never in overload.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

T = TypeVar("T")

# Name used in column names -> percentile. "p99_9" is p99.9.
PERCENTILES: dict[str, float] = {"p50": 50.0, "p95": 95.0, "p99": 99.0, "p99_9": 99.9}
LATENCY_KEYS: tuple[str, ...] = (*PERCENTILES, "max", "mean")
OPERATING_POINT_FRACTION = 0.98


def latency_stats(values_ms: np.ndarray) -> dict[str, float | None]:
    """p50/p95/p99/p99.9, max and mean of one array of latencies (ms); None for an empty array.

    Percentiles use numpy's default linear interpolation between closest ranks.
    """
    values = np.asarray(values_ms, dtype=np.float64)
    if values.size == 0:
        return {k: None for k in LATENCY_KEYS}
    qs = np.percentile(values, list(PERCENTILES.values()))
    out: dict[str, float | None] = {k: float(q) for k, q in zip(PERCENTILES, qs, strict=True)}
    out["max"] = float(values.max())
    out["mean"] = float(values.mean())
    return out


def pooled_latency_stats(runs: Iterable[np.ndarray]) -> dict[str, float | None]:
    """Percentiles over every sample of every run together (the honest tail)."""
    arrays = [np.asarray(a, dtype=np.float64) for a in runs]
    if not arrays:
        return latency_stats(np.empty(0))
    return latency_stats(np.concatenate(arrays))


def mean_of_run_stats(runs: Iterable[np.ndarray]) -> dict[str, float | None]:
    """The mean over runs of each run's own percentile (diluted tail; kept for comparison only)."""
    per_run = [latency_stats(a) for a in runs if np.asarray(a).size]
    out: dict[str, float | None] = {}
    for key in LATENCY_KEYS:
        vals = [v for r in per_run if (v := r[key]) is not None]
        out[key] = float(np.mean(vals)) if vals else None
    return out


def mean_std(values: Sequence[float]) -> tuple[float | None, float | None]:
    """Mean and sample standard deviation (ddof=1; 0.0 for a single value, None for none)."""
    if not values:
        return None, None
    arr = np.asarray(values, dtype=np.float64)
    return float(arr.mean()), float(arr.std(ddof=1)) if arr.size > 1 else 0.0


def efficiency(throughput_n: float | None, n_boards: int, throughput_1: float | None) -> float | None:
    """Scaling efficiency X(n) / (n · X(1)); None when either throughput is unknown or X(1) is 0."""
    if throughput_n is None or throughput_1 is None or throughput_1 <= 0 or n_boards < 1:
        return None
    return throughput_n / (n_boards * throughput_1)


@dataclass(frozen=True)
class OperatingPoint:
    concurrency: int
    throughput: float
    peak_concurrency: int
    peak_throughput: float
    fraction: float
    # Human-readable warnings: peak at the top of the sweep, knee possibly below the sweep.
    warnings: tuple[str, ...]

    def as_dict(self) -> dict[str, object]:
        return {
            "per_board_concurrency": self.concurrency,
            "throughput_inf_per_s": self.throughput,
            "peak_per_board_concurrency": self.peak_concurrency,
            "peak_throughput_inf_per_s": self.peak_throughput,
            "fraction_of_peak_rule": self.fraction,
            "warnings": list(self.warnings),
        }


def operating_point(
    curve: Mapping[int, float], fraction: float = OPERATING_POINT_FRACTION
) -> OperatingPoint | None:
    """Lowest concurrency whose throughput is ≥ ``fraction`` × the peak of ``curve`` (concurrency →
    mean throughput). Warns when the peak sits at the largest concurrency swept (throughput may still
    be rising) or when the lowest one already qualifies (the knee may be below the sweep)."""
    if not curve:
        return None
    points = sorted(curve.items())
    peak_c, peak_x = max(points, key=lambda p: (p[1], -p[0]))
    threshold = fraction * peak_x
    op_c, op_x = next(p for p in points if p[1] >= threshold)
    warnings: list[str] = []
    if len(points) > 1 and peak_c == points[-1][0]:
        warnings.append(
            f"peak throughput is at the largest concurrency swept ({peak_c}): throughput may still be "
            "rising, so the operating point may be too low; extend the sweep upwards"
        )
    if len(points) > 1 and op_c == points[0][0] and op_c > 1:
        warnings.append(
            f"the lowest concurrency swept ({op_c}) already gives {op_x / peak_x:.1%} of peak: the knee "
            "may lie below the sweep; add lower concurrencies"
        )
    if len(points) == 1:
        warnings.append("only one concurrency was swept: the operating point is not a measured knee")
    return OperatingPoint(op_c, op_x, peak_c, peak_x, fraction, tuple(warnings))


def spread(values: Mapping[str, float]) -> tuple[float | None, str | None, str | None]:
    """Slowest / fastest of per-board latencies: (ratio, slowest board, fastest board)."""
    known = {k: v for k, v in values.items() if v is not None and v > 0}
    if len(known) < 2:
        return None, None, None
    slowest = max(known, key=known.__getitem__)
    fastest = min(known, key=known.__getitem__)
    return known[slowest] / known[fastest], slowest, fastest


def alternating_order(items: Sequence[T], repetition: int) -> list[T]:
    """Forward on even repetitions, reversed on odd ones, so slow drift (heat, caches) cancels."""
    return list(items) if repetition % 2 == 0 else list(reversed(items))


def alternating_repetitions(items: Sequence[T], repetitions: int) -> Iterator[tuple[int, T]]:
    """``(repetition, item)`` for every item of every repetition, each in ``alternating_order``: the
    plan loop every experiment shares."""
    for repetition in range(repetitions):
        for item in alternating_order(items, repetition):
            yield repetition, item
