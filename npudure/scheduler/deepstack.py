"""The DeepStack / CodeProject.AI response shape: what Frigate, Home Assistant, Blue Iris and Agent DVR read.

DeepStack answers ``{"success": true, "predictions": [{"label", "confidence", "x_min", "y_min",
"x_max", "y_max"}, ...]}`` with integer pixel corners in the posted image; CodeProject.AI Server adds
``message``, ``count``, ``inferenceMs``, ``processMs``, ``analysisRoundTripMs``, ``moduleId``,
``command``, ``processedBy`` and ``code``. Errors are ``{"success": false, "error": "..."}`` with the
HTTP status in ``code``. Predictions go out sorted by confidence, highest first: Frigate stops reading
at the first one under its threshold.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from npudure.proto import inference_pb2 as pb
from npudure.vision.labels import coco_label as label

DEFAULT_MIN_CONFIDENCE = 0.4  # DeepStack's and CodeProject.AI's default
MODULE_ID = "npudure"
MODULE_NAME = "NPUDure cluster (YOLOv8n on Rockchip NPUs)"


def predictions(detections: Sequence[pb.Detection], min_confidence: float) -> list[dict[str, Any]]:
    """The board's detections (boxes in the posted image's pixels) at or above ``min_confidence``,
    highest confidence first; corners rounded to whole pixels; the model's label (COCO's name of the
    class id from a board too old to send one)."""
    kept = sorted((d for d in detections if d.score >= min_confidence), key=lambda d: -d.score)
    out = []
    for d in kept:
        x1, y1, x2, y2 = round(d.x1), round(d.y1), round(d.x2), round(d.y2)
        if x2 <= x1 or y2 <= y1:
            continue  # a box wholly in the letterbox padding: nothing of it is in the posted image
        out.append(
            {
                "label": d.label or label(d.class_id),
                "confidence": round(d.score, 4),
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
