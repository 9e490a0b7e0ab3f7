"""The sim model against the reference's own measurements (typed here from the seed write-up, not
taken from the code's tables), and the known calibration gap kept visible."""

import itertools
import time

import numpy as np
import pytest
from helpers.seed import SEED_LOCAL_INF_S, SEED_RR_SPREAD, TOLERANCE

from npudure.backends.sim import SimBackend, cap_factor
from npudure.config import SimConfig


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
