"""The DeepStack response shape: sorted, thresholded, labelled, whole pixels, padding boxes dropped."""

from __future__ import annotations

from npudure.proto import inference_pb2 as pb
from npudure.scheduler import deepstack


def _det(
    box: tuple[float, float, float, float], score: float, class_id: int, label: str = ""
) -> pb.Detection:
    x1, y1, x2, y2 = box
    return pb.Detection(class_id=class_id, label=label, score=score, x1=x1, y1=y1, x2=x2, y2=y2)


def test_predictions_are_sorted_thresholded_and_labelled() -> None:
    dets = [
        _det((1.4, 2.6, 10, 20), 0.5, 2, "car"),
        _det((5, 5, 50, 50), 0.9, 0, "person"),
        _det((0, 0, 9, 9), 0.3, 16, "dog"),
        _det((3, 3, 3, 30), 0.95, 7, "truck"),
    ]
    preds = deepstack.predictions(dets, 0.4)
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


def test_the_models_own_label_is_used_and_cocos_name_only_when_the_board_sends_none() -> None:
    preds = deepstack.predictions([_det((0, 0, 5, 5), 0.8, 1, "pallet"), _det((0, 0, 5, 5), 0.7, 2)], 0.4)
    assert [p["label"] for p in preds] == ["pallet", "car"]


def test_success_and_error_carry_the_codeproject_fields() -> None:
    body = deepstack.success([], "board2", 12.4, 20.0, 25.0, {"emulated": True})
    assert body["success"] is True and body["count"] == 0 and body["processedBy"] == "board2"
    assert body["inferenceMs"] == 12 and body["code"] == 200 and body["emulated"] is True
    assert deepstack.error("bad", 400) == {"success": False, "error": "bad", "code": 400}
