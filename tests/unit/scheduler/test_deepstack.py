"""The DeepStack response shape: sorted, thresholded, labelled, whole pixels, padding boxes dropped."""

from __future__ import annotations

import numpy as np

from npudure.scheduler import deepstack


def test_predictions_are_sorted_thresholded_and_labelled() -> None:
    boxes = np.array([[1.4, 2.6, 10, 20], [5, 5, 50, 50], [0, 0, 9, 9], [3, 3, 3, 30]], float)
    scores = np.array([0.5, 0.9, 0.3, 0.95])
    classes = np.array([2, 0, 16, 7])
    preds = deepstack.predictions(boxes, scores, classes, 0.4)
    # 0.95 is a zero-width box (wholly in the letterbox padding): dropped; 0.3 is under the threshold.
    assert [(p["label"], p["confidence"]) for p in preds] == [("person", 0.9), ("car", 0.5)]
    assert preds[1] | {} == {
        "label": "car",
        "confidence": 0.5,
        "x_min": 1,
        "y_min": 3,
        "x_max": 10,
        "y_max": 20,
    }


def test_success_and_error_carry_the_codeproject_fields() -> None:
    body = deepstack.success([], "board2", 12.4, 20.0, 25.0, {"emulated": True})
    assert body["success"] is True and body["count"] == 0 and body["processedBy"] == "board2"
    assert body["inferenceMs"] == 12 and body["code"] == 200 and body["emulated"] is True
    assert deepstack.error("bad", 400) == {"success": False, "error": "bad", "code": 400}
