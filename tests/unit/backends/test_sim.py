"""The sim model against the reference's own measurements (typed here from the seed write-up, not
taken from the code's tables), and the known calibration gap kept visible."""

import itertools
import time

import numpy as np
import pytest

from npudure.backends.sim import SimBackend, cap_factor
from npudure.backends.sim_queue import round_robin_spread
from npudure.config import SimConfig

# Seed: one RK3576 board, local inference, no network, 2 NPU cores.
SEED_LOCAL_INF_S = 161.5
# Seed: CPU cap on one board -> per-board latency spread (slowest / fastest mean), round robin, fan on.
SEED_RR_SPREAD = {2208: 1.12, 1608: 1.18, 1200: 1.33, 1008: 1.79, 816: 2.26, 600: 3.93}
# Seed: 3 boards, concurrency 8 per board -> 338.4 inf/s, so a request took 24 / 338.4 = 70.9 ms end
# to end, of which 12.4 ms on the NPU: ~58.5 ms outside it (transport, scheduler, network).
SEED_PATH_S = 24 / 338.4 - 2 / SEED_LOCAL_INF_S
TOLERANCE = 0.15


def test_one_board_serves_the_reference_local_throughput() -> None:
    """Seed: 161.5 inf/s local with 8 threads, each its own context (the sim's default count)."""
    assert SimBackend(8, SimConfig()).capacity_inf_s() == pytest.approx(SEED_LOCAL_INF_S, rel=0.01)


@pytest.mark.parametrize(("mhz", "spread"), SEED_RR_SPREAD.items())
def test_capped_service_time_follows_the_seed_ladder(mhz: int, spread: float) -> None:
    """Without queueing (what least_inflight sees) the capped board is as much slower as the seed's ladder."""
    capped = SimBackend(2, SimConfig(cpu_cap_mhz=mhz)).mean_service_s()
    free = SimBackend(2, SimConfig()).mean_service_s()
    assert capped / free == pytest.approx(spread, rel=TOLERANCE)


def test_cap_factor_is_monotone_and_clamped() -> None:
    steps = [cap_factor(m) for m in range(300, 3001, 50)]
    assert all(a >= b for a, b in itertools.pairwise(steps))
    assert cap_factor(None) == 1.0
    assert cap_factor(100) == cap_factor(600) and cap_factor(5000) == cap_factor(2208)


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


def test_time_scale_and_runtime_cap_change_service_time() -> None:
    backend = SimBackend(2, SimConfig(time_scale=4.0, jitter_cv=0))
    base = SimBackend(2, SimConfig(jitter_cv=0)).mean_service_s()
    assert backend.mean_service_s() == pytest.approx(4 * base)
    backend.set_cpu_cap(816)
    assert backend.mean_service_s() == pytest.approx(4 * base * cap_factor(816))
    start = time.perf_counter()
    result = backend.contexts[0].run(np.zeros((640, 640, 3), np.uint8))
    model, _ = backend.emulation_totals() or (0.0, 0.0)
    assert model == pytest.approx(backend.mean_service_s(), rel=0.5)  # the CPU phase varies (cv 0.3)
    assert time.perf_counter() - start >= model  # a sleep never returns early
    assert result.detections.shape == (0, 6)
    assert backend.emulated
