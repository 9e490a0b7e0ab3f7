"""The DeepStack / CodeProject.AI response shape: what Frigate, Home Assistant, Blue Iris and Agent DVR read.

DeepStack answers ``{"success": true, "predictions": [{"label", "confidence", "x_min", "y_min",
"x_max", "y_max"}, ...]}`` with integer pixel corners in the posted image; CodeProject.AI Server adds
``message``, ``count``, ``inferenceMs``, ``processMs``, ``analysisRoundTripMs``, ``moduleId``,
``command``, ``processedBy`` and ``code``. Errors are ``{"success": false, "error": "..."}`` with the
HTTP status in ``code``. Predictions go out sorted by confidence, highest first: Frigate stops reading
at the first one under its threshold.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from npudure.vision.coco import label

DEFAULT_MIN_CONFIDENCE = 0.4  # DeepStack's and CodeProject.AI's default
MODULE_ID = "npudure"
MODULE_NAME = "NPUDure cluster (YOLOv8n on Rockchip NPUs)"


def predictions(boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray, min_confidence: float) -> list:
    """Rows at or above ``min_confidence``, highest confidence first; corners rounded to whole pixels."""
    keep = np.flatnonzero(scores >= min_confidence)
    keep = keep[np.argsort(-scores[keep], kind="stable")]
    out = []
    for i in keep.tolist():
        x1, y1, x2, y2 = (round(float(v)) for v in boxes[i])
        if x2 <= x1 or y2 <= y1:
            continue  # a box wholly in the letterbox padding: nothing of it is in the posted image
        out.append(
            {
                "label": label(int(classes[i])),
                "confidence": round(float(scores[i]), 4),
                "x_min": x1,
                "y_min": y1,
                "x_max": x2,
                "y_max": y2,
            }
        )
    return out


def success(
    preds: list,
    board: str,
    inference_ms: float,
    process_ms: float,
    round_trip_ms: float,
    extra: dict[str, Any],
) -> dict[str, Any]:
    labels = sorted({p["label"] for p in preds})
    return {
        "success": True,
        "message": f"Found {', '.join(labels)}" if labels else "No objects found",
        "count": len(preds),
        "predictions": preds,
        "inferenceMs": round(inference_ms),
        "processMs": round(process_ms),
        "analysisRoundTripMs": round(round_trip_ms),
        "moduleId": MODULE_ID,
        "moduleName": MODULE_NAME,
        "command": "detect",
        "processedBy": board,
        "code": 200,
        **extra,
    }


def error(message: str, status: int) -> dict[str, Any]:
    return {"success": False, "error": message, "code": status}
