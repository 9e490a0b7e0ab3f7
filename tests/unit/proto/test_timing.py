"""Stage timing to the JSON the HTTP API and the zmq header carry, and back, through one field list."""

from __future__ import annotations

from npudure.proto import inference_pb2 as pb
from npudure.proto import timing


def test_every_stage_goes_out_as_a_number_and_comes_back() -> None:
    sent = pb.StageTiming(board_total_us=9000, inference_us=7000, scheduler_total_us=12_000)
    table = timing.as_dict(sent)
    assert set(table) == {f.name for f in pb.StageTiming.DESCRIPTOR.fields}
    assert table["board_total_us"] == 9000 and isinstance(table["scheduler_total_us"], int)
    assert timing.from_dict(table) == sent


def test_unknown_stages_and_a_missing_table_are_left_out() -> None:
    assert timing.from_dict({"board_total_us": "5", "a_stage_from_elsewhere": 3}) == pb.StageTiming(
        board_total_us=5
    )
    assert timing.from_dict(None) == timing.from_dict([1, 2]) == pb.StageTiming()
