"""Boards' answers to the same frames, reduced to hashes and compared (``npudure check-answers``).

The reference found an NPU context shared between threads silently returning another thread's answer:
nothing fails, the detections are just someone else's. So every board gets the same frames and each
frame's detections are hashed after rounding (a real NPU and its runtime may differ in the last bits
of a float; an answer meant for another frame differs by whole boxes). A board is named when its
hashes differ from the majority's, or when the same frame got different answers from it across repeats.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

SCORE_STEP = 0.01
BOX_STEP_PX = 1.0
PRECISION = "class ids, scores to 0.01, box corners to 1 px, sorted"


class DetectionLike(Protocol):
    """The fields of ``pb.Detection`` the hash reads (tests pass plain objects)."""

    class_id: int
    score: float
    x1: float
    y1: float
    x2: float
    y2: float


def canonical(detections: Iterable[DetectionLike]) -> list[tuple[int, ...]]:
    """Each detection as integers at the stated precision, sorted: the order a board lists them in
    (its NMS's tie-breaking) is not part of the answer."""
    rows = [
        (
            int(d.class_id),
            round(d.score / SCORE_STEP),
            *(round(v / BOX_STEP_PX) for v in (d.x1, d.y1, d.x2, d.y2)),
        )
        for d in detections
    ]
    return sorted(rows)


def frame_hash(detections: Iterable[DetectionLike]) -> str:
    return hashlib.sha256(json.dumps(canonical(detections)).encode()).hexdigest()


@dataclass
class BoardAnswers:
    """One board's answers: per frame, the hash of each repeat, in the order sent."""

    address: str
    node: str = ""
    backend: str = ""
    emulated: bool = False
    detections: int = 0  # over every frame's first answer
    repeats: list[list[str]] = field(default_factory=list)  # [frame][repeat] -> hash

    @property
    def name(self) -> str:
        return f"{self.node} ({self.address})" if self.node else self.address

    @property
    def frame_hashes(self) -> list[str]:
        """Each frame's first answer."""
        return [hashes[0] for hashes in self.repeats]

    @property
    def unstable_frames(self) -> list[int]:
        """Frames whose repeats got different answers from this one board."""
        return [i for i, hashes in enumerate(self.repeats) if len(set(hashes)) > 1]

    @property
    def digest(self) -> str:
        """All frames' answers as one hash (the line printed per board)."""
        return hashlib.sha256("\n".join(self.frame_hashes).encode()).hexdigest()


@dataclass(frozen=True)
class Verdict:
    majority: str | None  # the digest more than half of the boards gave; None: no majority
    agreeing: int  # boards with that digest
    # (board, frames on which it differs from the majority's answer; every frame when no majority)
    disagreeing: list[tuple[BoardAnswers, list[int]]]
    unstable: list[BoardAnswers]  # boards whose repeats of a frame disagreed


def compare(boards: Sequence[BoardAnswers]) -> Verdict:
    """Boards against the majority: a board is named when its digest is not the one more than half of
    them gave. With no such majority (two boards that differ, a three-way split) every board whose
    digest is not shared by more than half is named: the check cannot tell which is right."""
    counts = Counter(b.digest for b in boards)
    top, top_count = counts.most_common(1)[0] if counts else ("", 0)
    majority = top if top_count * 2 > len(boards) else None
    reference = next((b.frame_hashes for b in boards if b.digest == majority), None)
    disagreeing = []
    for board in boards:
        if board.digest == majority:
            continue
        if reference is None:
            frames = list(range(len(board.frame_hashes)))
        else:
            frames = [
                i
                for i, (mine, theirs) in enumerate(zip(board.frame_hashes, reference, strict=True))
                if mine != theirs
            ]
        disagreeing.append((board, frames))
    unstable = [b for b in boards if b.unstable_frames]
    return Verdict(majority, top_count if majority else 0, disagreeing, unstable)
