"""The 11 stages: every one is a StageTiming field, and the client's two come from its call time."""

from __future__ import annotations

import numpy as np

from npudure.backends.sim import SimBackend
from npudure.client import stages
from npudure.config import SimConfig
from npudure.proto import inference_pb2 as pb


def test_the_eleven_stages_are_fields_of_stage_timing() -> None:
    fields = {f.name for f in pb.StageTiming.DESCRIPTOR.fields}
    names = [name for name, _, _ in stages.STAGES]
    assert len(names) == len(set(names)) == 11
    assert set(names) <= fields


def test_client_stages_through_a_scheduler_and_directly() -> None:
    via = pb.StageTiming(scheduler_total_us=30_000, board_total_us=25_000)
    stages.complete_client_stages(via, 0.0345)
    assert (via.client_total_us, via.network_to_client_us) == (34_500, 4_500)
    direct = pb.StageTiming(board_total_us=25_000)
    stages.complete_client_stages(direct, 0.026)
    assert (direct.client_total_us, direct.network_to_client_us) == (26_000, 1_000)
    # A clock that says the call took less than the callee's total is clamped, never negative.
    odd = stages.complete_client_stages(pb.StageTiming(board_total_us=5_000), 0.004)
    assert odd.network_to_client_us == 0


def test_sim_reports_npu_input_apart_from_inference() -> None:
    ctx = SimBackend(1, SimConfig(jitter_cv=0)).contexts[0]
    frame = np.full((640, 640, 3), 7, dtype=np.uint8)
    result = ctx.run(frame)
    assert result.npu_input_s > 0 and result.inference_s > 0
    assert ctx._input is not frame and np.array_equal(ctx._input, frame)  # a real copy was made
