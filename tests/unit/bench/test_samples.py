"""Per-request samples: the client's two timing stages come from the harness's own call time."""

from __future__ import annotations

import pytest

from npudure.bench.samples import STAGES, from_raw
from npudure.proto import inference_pb2 as pb


def test_network_back_to_the_client_is_call_time_minus_the_clusters_own_total() -> None:
    reply = pb.InferResponse(
        node="board1", timing=pb.StageTiming(board_total_us=3000, scheduler_total_us=4000)
    ).SerializeToString()
    samples = from_raw([0.0, 0.0], [1.0, 1.0], [1.010, 1.002], [0, 14], [reply, None])
    stage = dict(zip(STAGES, samples.stage_us[0], strict=True))
    assert stage["client_total_us"] == pytest.approx(10_000, abs=1)
    assert stage["network_to_client_us"] == pytest.approx(6_000, abs=1)  # minus the scheduler's 4 ms
    assert stage["board_total_us"] == 3000
    assert not samples.stage_us[1].any()  # a failed call has no stages
