"""The round-robin queue model (npudure_workshop.bench.sim_queue) against the reference's per-board
spread ladder, and the known calibration gap kept visible (docs/sim-model.md)."""

import pytest
from helpers.seed import SEED_PATH_S, SEED_RR_SPREAD, TOLERANCE

from npudure.backends.sim import cap_factor
from npudure_workshop.bench.sim_queue import round_robin_spread

# The model's round-robin spread at the reference's operating point (3 boards x 2 NPU cores, 24 requests
# outstanding, the reference's ~58.5 ms non-NPU path), against the seed: within 15% down to 1008 MHz, too
# wide at 816 and 600, where the capped board becomes the bottleneck — the ladder is an end-to-end ratio
# that the sim applies to NPU service time (docs/sim-model.md).
# strict: when the model is fixed these turn XPASS and fail, so the marks must go.
_KNOWN_OFF = {816, 600}
_XFAIL = pytest.mark.xfail(strict=True, reason="docs/sim-model.md")


@pytest.mark.parametrize(
    ("mhz", "spread"),
    [pytest.param(m, s, marks=[_XFAIL] if m in _KNOWN_OFF else []) for m, s in SEED_RR_SPREAD.items()],
)
def test_round_robin_spread_at_the_reference_operating_point(mhz: int, spread: float) -> None:
    got = round_robin_spread(cap_factor(mhz), SEED_PATH_S)
    assert got == pytest.approx(spread, rel=TOLERANCE)


def test_a_queueing_aware_calibration_would_reproduce_the_seed() -> None:
    """The service-time factors docs/sim-model.md derives (solved at the reference's operating point)
    reproduce the seed's round-robin ladder within 15% at every step, on other random seeds too."""
    solved = {2208: 1.272, 1608: 1.374, 1200: 1.562, 1008: 1.839, 816: 2.074, 600: 2.856}
    for mhz, spread in SEED_RR_SPREAD.items():
        for seed in (2, 3):
            got = round_robin_spread(solved[mhz], SEED_PATH_S, seed=seed)
            assert got == pytest.approx(spread, rel=TOLERANCE), (mhz, seed, got)


def test_without_a_path_the_capped_board_queues_under_round_robin() -> None:
    """Why the local cluster shows far larger round-robin spreads than the seed: little time is spent
    off the NPU, so the capped board becomes the bottleneck and builds the queue."""
    assert round_robin_spread(cap_factor(1200), 0.0) > 3 * round_robin_spread(cap_factor(1200), SEED_PATH_S)
