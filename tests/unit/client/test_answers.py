"""Detections reduced to hashes, and boards compared against the majority (npudure.client.answers)."""

from __future__ import annotations

from npudure.client.answers import BoardAnswers, canonical, compare, frame_hash
from npudure.proto import inference_pb2 as pb


def Det(class_id: int, score: float, x1: float, y1: float, x2: float, y2: float) -> pb.Detection:
    return pb.Detection(class_id=class_id, score=score, x1=x1, y1=y1, x2=x2, y2=y2)


A = [Det(0, 0.901, 10.2, 20.4, 100.0, 200.0), Det(2, 0.5, 1, 2, 3, 4)]


def board(address: str, *frames: list[str]) -> BoardAnswers:
    return BoardAnswers(address, node=address, repeats=[list(f) for f in frames])


def test_the_hash_ignores_order_and_noise_below_the_stated_precision() -> None:
    shuffled = [Det(2, 0.5004, 1.1, 2.2, 2.9, 4.0), Det(0, 0.899, 10.0, 20.0, 100.3, 199.8)]
    assert frame_hash(A) == frame_hash(shuffled)
    assert canonical(A) == [(0, 90, 10, 20, 100, 200), (2, 50, 1, 2, 3, 4)]


def test_another_box_class_or_count_changes_the_hash() -> None:
    assert frame_hash(A) != frame_hash(A[:1])
    assert frame_hash(A) != frame_hash([A[0], Det(3, 0.5, 1, 2, 3, 4)])
    assert frame_hash(A) != frame_hash([A[0], Det(2, 0.5, 1, 2, 13, 4)])
    assert frame_hash([]) != frame_hash(A)


def test_the_board_off_the_majority_is_named_with_the_frames_it_differs_on() -> None:
    good = ["h0", "h1", "h2"]
    boards = [
        board("b1", *[[h] for h in good]),
        board("b2", *[[h] for h in good]),
        board("b3", ["h0"], ["x"], ["y"]),
    ]
    verdict = compare(boards)
    assert verdict.majority == boards[0].digest and verdict.agreeing == 2
    assert [(b.address, frames) for b, frames in verdict.disagreeing] == [("b3", [1, 2])]
    assert verdict.unstable == []


def test_all_agree() -> None:
    boards = [board(f"b{i}", ["h0"], ["h1"]) for i in range(3)]
    verdict = compare(boards)
    assert verdict.agreeing == 3 and verdict.disagreeing == [] and verdict.unstable == []


def test_without_a_majority_every_board_is_named() -> None:
    verdict = compare([board("b1", ["h0"]), board("b2", ["h1"])])
    assert verdict.majority is None
    assert [b.address for b, _ in verdict.disagreeing] == ["b1", "b2"]


def test_a_frame_answered_differently_across_repeats_marks_the_board_unstable() -> None:
    shaky = board("b2", ["h0", "h0"], ["h1", "h9"])
    verdict = compare(
        [board("b1", ["h0", "h0"], ["h1", "h1"]), shaky, board("b3", ["h0", "h0"], ["h1", "h1"])]
    )
    assert verdict.unstable == [shaky] and shaky.unstable_frames == [1]
    assert verdict.disagreeing == []  # its first answers agree: only the repeats show the mix-up
