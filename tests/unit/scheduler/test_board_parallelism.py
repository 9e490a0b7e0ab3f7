"""A board's parallelism (what ECT divides by): its contexts, else an older agent's npu_cores."""

from __future__ import annotations

from npudure.proto import inference_pb2 as pb
from npudure.scheduler.boards import Board


def test_parallelism_follows_contexts_then_npu_cores_then_one() -> None:
    board = Board(0, "b1", "127.0.0.1:1", 8)
    assert board.parallelism == 1  # not reported yet
    board.last_status = pb.NodeStatus(npu_cores=2)  # an agent from before contexts
    assert board.parallelism == 2
    board.last_status = pb.NodeStatus(npu_cores=2, contexts=8)
    assert board.parallelism == 8
    board.last_status = pb.NodeStatus()
    assert board.parallelism == 1
