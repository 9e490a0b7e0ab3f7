"""Frigate's zmq detector client, as the tests use it (it lives in the package: the benchmarks use it
too), and the comparison of its rows with the HTTP API's predictions for the same picture."""

from __future__ import annotations

import numpy as np
import pytest

from npudure.vision.labels import COCO80
from npudure_workshop.bench.frigate import ZEROS, FrigateDetector

__all__ = ["ZEROS", "FrigateDetector", "assert_rows_match_predictions"]


def assert_rows_match_predictions(rows: np.ndarray, preds: list[dict], side: int) -> None:
    """Frigate's rows ([id, score, y_min, x_min, y_max, x_max] / side, the found ones) and the HTTP
    API's predictions (pixels, rounded) for the same picture: the same labels, scores and boxes."""
    assert len(rows) >= 1 and len(rows) == len(preds), (rows, preds)
    for row, pred in zip(rows, preds, strict=True):  # both sorted by score, highest first
        assert COCO80[int(row[0])] == pred["label"]
        assert row[1] == pytest.approx(pred["confidence"], abs=1e-4)
        corners = [pred["y_min"], pred["x_min"], pred["y_max"], pred["x_max"]]
        assert row[2:] * side == pytest.approx(corners, abs=1.0)
