"""``npudure bench contexts``' numbers: which context counts it sweeps, the load at each, and the
operating point by the reference's rule (the lowest count within 2% of peak throughput).

More contexts than needed cost memory and CPU for nothing (each holds the model and a worker thread),
so the operating point is not the peak but the least that gets within 2% of it.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping
from dataclasses import dataclass

from npudure.argtypes import split_numbers

# The agent's own range for `contexts` (npudure.config.AgentConfig).
MIN_CONTEXTS, MAX_CONTEXTS = 1, 64
SWEEP = (1, 2, 4, 8, 16)
# The agent's default count (the reference's RK3576: 8 contexts beat 4 by 27%): always measured, so the
# sweep says what the default costs or leaves on the table.
DEFAULT_CONTEXTS = 8
WITHIN_PEAK = 0.02  # the operating point: the lowest count within this fraction of the peak
LOAD_FACTOR = 2.0  # closed loop at this many requests outstanding per context


def context_counts(text: str) -> list[int]:
    """``--contexts 1,2,4``: whole numbers from 1 to 64 (argparse type: a bad list is exit 2)."""
    values = split_numbers(text, int, "whole numbers", "1,2,4")
    if not values:
        raise argparse.ArgumentTypeError(f"{text!r}: expected at least one context count, e.g. 1,2,4")
    bad = [v for v in values if not MIN_CONTEXTS <= v <= MAX_CONTEXTS]
    if bad:
        raise argparse.ArgumentTypeError(
            f"{text!r}: context counts run from {MIN_CONTEXTS} to {MAX_CONTEXTS} (got {bad[0]})"
        )
    return values


def sweep_counts(chosen: list[int] | None) -> list[int]:
    """The counts measured, ascending, once each: the chosen ones (default ``SWEEP``) and the default."""
    return sorted({*(chosen or SWEEP), DEFAULT_CONTEXTS})


def concurrency_for(contexts: int, load_factor: float = LOAD_FACTOR) -> int:
    """Requests outstanding at a board with ``contexts`` contexts: enough to keep every one busy while
    replies travel back (closed loop at ``load_factor`` x contexts)."""
    return max(1, math.ceil(contexts * load_factor))


@dataclass(frozen=True)
class OperatingPoint:
    contexts: int
    throughput: float
    peak_contexts: int
    peak_throughput: float

    @property
    def fraction_of_peak(self) -> float:
        return self.throughput / self.peak_throughput


def operating_point(
    throughput: Mapping[int, float | None], within: float = WITHIN_PEAK
) -> OperatingPoint | None:
    """The lowest count whose throughput is within ``within`` of the peak; counts without a figure
    (no valid run) are left out; None when none has one."""
    measured = {c: x for c, x in throughput.items() if x is not None and x > 0}
    if not measured:
        return None
    peak_contexts, peak = max(measured.items(), key=lambda kv: (kv[1], -kv[0]))
    chosen = min(c for c, x in measured.items() if x >= (1 - within) * peak)
    return OperatingPoint(chosen, measured[chosen], peak_contexts, peak)
