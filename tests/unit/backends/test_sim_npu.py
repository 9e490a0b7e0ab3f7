"""Sim v2 against the reference's contexts table (typed here from the seed, not taken from the code),
its closed form against a simulation of the same phases, and the processor-sharing bookkeeping."""

from __future__ import annotations

import heapq
import itertools
import math
import random

import pytest

from npudure.backends import sim_npu
from npudure.backends.sim_npu import FluidShare, throughput_inf_s

# Reference (ADR-020), RK3576, one context per thread, CORE_AUTO: 1/2/4/8 -> 16.7/36.2/52.4/72.9 inf/s.
SEED_THREADS = {1: 16.7, 2: 36.2, 4: 52.4, 8: 72.9}
SEED_ONE_CORE_VS_TWO = 73.0 / 48.2  # 8 threads
SEED_INT8_AT_8 = 161.5


@pytest.mark.parametrize("contexts", [1, 2, 4])
def test_the_contexts_curve_follows_the_reference_within_10_percent(contexts: int) -> None:
    seed_ratio = SEED_THREADS[contexts] / SEED_THREADS[8]
    model_ratio = throughput_inf_s(contexts) / throughput_inf_s(8)
    assert model_ratio == pytest.approx(seed_ratio, rel=0.10)


def test_one_core_against_two_at_8_contexts_is_the_reference_1_51() -> None:
    ratio = throughput_inf_s(8, cores=2) / throughput_inf_s(8, cores=1)
    assert ratio == pytest.approx(SEED_ONE_CORE_VS_TWO, rel=0.02)


def test_8_contexts_give_the_reference_int8_figure_and_scale_with_time() -> None:
    assert throughput_inf_s(8) == pytest.approx(SEED_INT8_AT_8, rel=0.01)
    assert throughput_inf_s(8, scale=10.0) == pytest.approx(SEED_INT8_AT_8 / 10, rel=0.01)


def test_8_contexts_give_at_least_1_9_times_2() -> None:
    assert throughput_inf_s(8) >= 1.9 * throughput_inf_s(2)


def test_more_contexts_never_serve_less_and_the_path_bounds_them() -> None:
    curve = [throughput_inf_s(n) for n in range(1, 65)]
    assert all(b >= a for a, b in itertools.pairwise(curve))
    assert curve[-1] <= 1 / sim_npu.SUBMIT_S  # one shared submission path


def test_bad_counts_are_refused() -> None:
    with pytest.raises(ValueError):
        throughput_inf_s(0)


def _simulated(contexts: int, cores: int, seconds: float = 60.0, seed: int = 1) -> float:
    """The same three phases run as discrete events (no closed form): completions per second."""
    rnd = random.Random(seed)
    sigma = math.sqrt(math.log1p(sim_npu.CPU_PHASE_CV**2))

    def cpu_phase() -> float:
        return sim_npu.CPU_PHASE_S * rnd.lognormvariate(-sigma * sigma / 2, sigma)

    path, npu = FluidShare(1), FluidShare(cores)
    in_cpu = [(cpu_phase(), job) for job in range(contexts)]
    heapq.heapify(in_cpu)
    done, now = 0, 0.0
    while now < seconds:
        nexts = [in_cpu[0][0]] if in_cpu else []
        nexts += [f.t + min(f.left.values()) / f.rate() for f in (path, npu) if f.left]
        now = min(nexts)
        while in_cpu and in_cpu[0][0] <= now:
            path.add(heapq.heappop(in_cpu)[1], sim_npu.SUBMIT_S, now)
        path.advance(now)
        for job in list(path.finished_at):
            del path.finished_at[job]
            npu.add(job, sim_npu.CORE_S, now)
        npu.advance(now)
        for job in list(npu.finished_at):
            del npu.finished_at[job]
            done += 1
            heapq.heappush(in_cpu, (now + cpu_phase(), job))
    return done / now


@pytest.mark.parametrize(("contexts", "cores"), [(1, 2), (2, 2), (4, 2), (8, 2), (8, 1), (16, 2)])
def test_the_closed_form_is_what_the_phases_do(contexts: int, cores: int) -> None:
    assert _simulated(contexts, cores) == pytest.approx(throughput_inf_s(contexts, cores), rel=0.03)


def test_fluid_share_one_unit_splits_it_between_jobs() -> None:
    share = FluidShare(1)
    share.add(1, 0.10, 0.0)
    share.add(2, 0.02, 0.05)  # job 1 has 0.05 left; both now progress at half speed
    share.advance(1.0)
    assert share.finished_at[2] == pytest.approx(0.09)
    assert share.finished_at[1] == pytest.approx(0.12)  # 0.03 left at 0.09, alone again
    assert not share.left


def test_fluid_share_with_two_units_serves_two_jobs_at_full_speed() -> None:
    share = FluidShare(2)
    for job in range(3):
        share.add(job, 0.06, 0.0)  # three jobs on two units: each at 2/3
    share.advance(0.05)
    assert not share.finished_at
    share.advance(0.2)
    assert all(end == pytest.approx(0.09) for end in share.finished_at.values())


def test_shared_server_returns_the_model_time_of_a_lone_job() -> None:
    server = sim_npu.SharedServer(1)
    assert server.serve(0.01) == pytest.approx(0.01, abs=1e-6)


def test_a_boards_models_share_its_npu_and_boards_keep_their_own() -> None:
    from npudure.backends.sim import SimBackend
    from npudure.config import SimConfig

    general = SimBackend(2, SimConfig(), npu_cores=2, board="b1")
    plates = SimBackend(2, SimConfig(), npu_cores=2, board="b1")
    other = SimBackend(2, SimConfig(), npu_cores=2, board="b2")
    alone = SimBackend(2, SimConfig(), npu_cores=2)
    assert general.npu is plates.npu and general.cores is plates.cores
    assert other.npu is not general.npu and alone.npu is not general.npu
