"""Detections as the wire carries them: named by the model's class names, in the sent image's pixels."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from npudure.proto import inference_pb2 as pb
from npudure.vision.labels import label


def detections_proto(detections: np.ndarray, names: Sequence[str]) -> list[pb.Detection]:
    """(N, 6) rows ``x1, y1, x2, y2, score, class_id`` → Detection messages with their labels."""
    return [
        pb.Detection(
            class_id=int(d[5]),
            label=label(names, int(d[5])),
            score=float(d[4]),
            x1=d[0],
            y1=d[1],
            x2=d[2],
            y2=d[3],
        )
        for d in detections.tolist()
    ]
