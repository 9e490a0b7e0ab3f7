"""Per-request samples: the client's two timing stages come from the harness's own call time."""

from __future__ import annotations

import pytest

from npudure.proto import inference_pb2 as pb
from npudure_workshop.bench.samples import STAGES, from_raw


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


def test_every_samples_field_is_saved_and_loaded_through_one_column_map(tmp_path) -> None:
    import dataclasses

    import numpy as np

    from npudure_workshop.bench.samples import COLUMNS, Samples

    # Every per-request field but the stage matrix goes through COLUMNS, so save and load cannot drift.
    names = {"stage_us", "node_names", "backend_names", "model_names"}
    per_request = {f.name for f in dataclasses.fields(Samples)} - names
    assert set(COLUMNS) == per_request
    reply = pb.InferResponse(
        node="board2", backend="sim", emulated=True, attempts=2, model="plates"
    ).SerializeToString()
    samples = from_raw([0.5, 0.6], [0.5, 0.7], [0.9, 1.1], [0, 14], [reply, None])
    samples.save(tmp_path / "s.npz")
    back = Samples.load(tmp_path / "s.npz")
    for name in per_request | {"stage_us"}:
        assert np.array_equal(getattr(back, name), getattr(samples, name)), name
    assert (back.node_names, back.backend_names, back.model_names) == (["board2"], ["sim"], ["plates"])
    assert back.model_idx.tolist() == [0, -1]
    with np.load(tmp_path / "s.npz") as z:
        assert "intended_send_s" in z  # the file's own column name, unchanged


def test_a_result_folder_from_before_models_loads_with_no_model_known(tmp_path) -> None:
    import numpy as np

    from npudure_workshop.bench.samples import Samples

    samples = from_raw([0.5], [0.5], [0.9], [0], [pb.InferResponse(node="b1").SerializeToString()])
    samples.save(tmp_path / "s.npz")
    with np.load(tmp_path / "s.npz") as z:
        older = {k: z[k] for k in z.files if k not in ("model_idx", "model_names")}
    np.savez_compressed(tmp_path / "old.npz", **older)
    back = Samples.load(tmp_path / "old.npz")
    assert back.model_idx.tolist() == [-1] and back.model_names == []
