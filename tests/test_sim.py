import time

import numpy as np
import pytest

from npudure.backends.sim import BASE_SERVICE_S, CAP_LADDER, SimBackend, cap_factor
from npudure.config import SimConfig


def test_base_service_time_matches_reference_local_throughput() -> None:
    # 2 NPU cores at 161.5 inf/s => 12.38 ms per frame per core.
    assert pytest.approx(2 / 161.5) == BASE_SERVICE_S
    assert SimBackend(2, SimConfig()).capacity_inf_s() == pytest.approx(161.5)


@pytest.mark.parametrize(("mhz", "factor"), CAP_LADDER)
def test_cap_ladder_points_reproduce_reference(mhz: int, factor: float) -> None:
    assert cap_factor(mhz) == pytest.approx(factor)


def test_cap_factor_interpolates_and_clamps() -> None:
    assert cap_factor(None) == 1.0
    assert cap_factor(1104) == pytest.approx((1.79 + 1.33) / 2)
    assert cap_factor(300) == pytest.approx(3.93)
    assert cap_factor(3000) == pytest.approx(1.12)


def test_time_scale_and_runtime_cap_change_service_time() -> None:
    backend = SimBackend(2, SimConfig(time_scale=4.0, jitter_cv=0))
    assert backend.mean_service_s() == pytest.approx(4 * BASE_SERVICE_S)
    backend.set_cpu_cap(816)
    assert backend.mean_service_s() == pytest.approx(4 * BASE_SERVICE_S * 2.26)
    start = time.perf_counter()
    result = backend.contexts[0].run(np.zeros((640, 640, 3), np.uint8))
    assert time.perf_counter() - start >= 4 * BASE_SERVICE_S * 2.26 * 0.95
    assert result.detections.shape == (0, 6)
    assert backend.emulated
