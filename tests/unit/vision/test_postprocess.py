"""YOLOv8 post-processing on hand-built output tensors whose boxes are known to the pixel."""

from __future__ import annotations

import numpy as np
import pytest

from npudure.vision.postprocess import LayoutError, dequantize, detect_layout, nms, postprocess

STRIDES = (8, 16, 32)
NC = 80
BIG = 30.0  # a DFL logit this far above the others makes its softmax one-hot


def zoo_outputs(nhwc: bool = False) -> list[np.ndarray]:
    """9 zoo tensors with every class probability at 0.01 (nothing detected yet)."""
    outs = []
    for s in STRIDES:
        hw = 640 // s
        outs += [
            np.zeros((1, 64, hw, hw), np.float32),
            np.full((1, NC, hw, hw), 0.01, np.float32),
            np.zeros((1, 1, hw, hw), np.float32),
        ]
    return outs


def plant_zoo(outs: list[np.ndarray], stride: int, gx: int, gy: int, ltrb, cls: int, prob: float) -> None:
    """Put a box with side distances ``ltrb`` (in strides; integers or halves) in cell (gx, gy)."""
    level = STRIDES.index(stride)
    box, scores, total = outs[3 * level : 3 * level + 3]
    for side, dist in enumerate(ltrb):
        logits = np.full(16, -BIG, np.float32)
        lo = int(np.floor(dist))
        logits[lo] = BIG
        if dist != lo:  # a half: two equal bins average to lo + 0.5
            assert dist - lo == 0.5
            logits[lo + 1] = BIG
        box[0, side * 16 : (side + 1) * 16, gy, gx] = logits
    scores[0, cls, gy, gx] = prob
    total[0, 0, gy, gx] = min(scores[0, :, gy, gx].sum(), 1.0)


def expected_xyxy(stride: int, gx: int, gy: int, ltrb) -> list[float]:
    left, t, r, b = ltrb
    return [
        (gx + 0.5 - left) * stride,
        (gy + 0.5 - t) * stride,
        (gx + 0.5 + r) * stride,
        (gy + 0.5 + b) * stride,
    ]


# The same box at (120, 168)-(232, 280) from a stride-16 cell and from a stride-8 cell.
BOX = [120.0, 168.0, 232.0, 280.0]


def planted_zoo() -> list[np.ndarray]:
    outs = zoo_outputs()
    assert expected_xyxy(16, 10, 12, (3, 2, 4, 5)) == BOX
    plant_zoo(outs, 16, 10, 12, (3, 2, 4, 5), cls=7, prob=0.9)
    # Overlapping box of the same class, lower score: x2 = 248, IoU 0.875 with BOX → suppressed.
    plant_zoo(outs, 16, 11, 12, (4, 2, 4, 5), cls=7, prob=0.6)
    # Same location, another class (stride 8, half-bin distances) → kept by per-class NMS.
    assert expected_xyxy(8, 21, 27, (6.5, 6.5, 7.5, 7.5)) == BOX
    plant_zoo(outs, 8, 21, 27, (6.5, 6.5, 7.5, 7.5), cls=3, prob=0.8)
    # Below the 0.25 threshold → dropped.
    plant_zoo(outs, 32, 5, 5, (1, 1, 1, 1), cls=1, prob=0.2)
    return outs


def test_zoo_layout_decodes_planted_boxes() -> None:
    outs = planted_zoo()
    assert detect_layout([o.shape for o in outs]) == "zoo"
    dets = postprocess(outs)
    assert dets.dtype == np.float32 and dets.shape == (2, 6)
    np.testing.assert_allclose(dets[0, :4], BOX, atol=1.0)
    np.testing.assert_allclose(dets[1, :4], BOX, atol=1.0)
    assert dets[0, 4] == pytest.approx(0.9) and dets[0, 5] == 7
    assert dets[1, 4] == pytest.approx(0.8) and dets[1, 5] == 3


def test_zoo_nms_removes_the_lower_duplicate_only_within_a_class() -> None:
    outs = planted_zoo()
    # With NMS effectively off (IoU threshold 1) the duplicate at (120,168)-(248,280) survives.
    dets = postprocess(outs, iou_threshold=1.0)
    assert len(dets) == 3
    dup = dets[np.isclose(dets[:, 4], 0.6)]
    np.testing.assert_allclose(dup[0, :4], [120, 168, 248, 280], atol=1.0)


def test_thresholds_and_cap_are_applied() -> None:
    outs = planted_zoo()
    low = postprocess(outs, score_threshold=0.1)
    assert len(low) == 3 and low[-1, 5] == 1 and low[-1, 4] == pytest.approx(0.2)
    np.testing.assert_allclose(low[-1, :4], expected_xyxy(32, 5, 5, (1, 1, 1, 1)), atol=1.0)
    assert len(postprocess(outs, score_threshold=0.85)) == 1
    top = postprocess(outs, max_detections=1)
    assert len(top) == 1 and top[0, 5] == 7


def test_nhwc_zoo_outputs_give_the_same_detections() -> None:
    outs = planted_zoo()
    nhwc = [o.transpose(0, 2, 3, 1).copy() for o in outs]
    np.testing.assert_allclose(postprocess(nhwc), postprocess(outs), atol=1e-4)


def test_zoo_without_score_sum_outputs() -> None:
    outs = planted_zoo()
    six = [o for i, o in enumerate(outs) if i % 3 != 2]
    assert detect_layout([o.shape for o in six]) == "zoo"
    np.testing.assert_allclose(postprocess(six), postprocess(outs), atol=1e-4)


def test_boxes_are_clipped_to_the_image() -> None:
    outs = zoo_outputs()
    # Cell (19, 0) of stride 32: centre (624, 16); r = 3 → x2 = 720, t = 2 → y1 = -48.
    plant_zoo(outs, 32, 19, 0, (1, 2, 3, 1), cls=0, prob=0.5)
    dets = postprocess(outs)
    assert len(dets) == 1
    np.testing.assert_allclose(dets[0, :4], [592, 0, 640, 48], atol=1.0)


def test_nothing_above_threshold_gives_an_empty_float32_array() -> None:
    dets = postprocess(zoo_outputs())
    assert dets.shape == (0, 6) and dets.dtype == np.float32


# --- split layout (npudure's export: boxes as cx, cy, w, h in pixels) -----------------------------


def planted_split() -> tuple[np.ndarray, np.ndarray]:
    boxes = np.zeros((1, 4, 8400), np.float32)
    boxes[0, :, :] = [[320], [320], [10], [10]]
    scores = np.full((1, NC, 8400), 0.01, np.float32)

    def put(anchor: int, xyxy: list[float], cls: int, prob: float) -> None:
        x1, y1, x2, y2 = xyxy
        boxes[0, :, anchor] = [(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1]
        scores[0, cls, anchor] = prob

    put(100, BOX, 7, 0.9)
    put(101, [120, 168, 248, 280], 7, 0.6)  # same class, IoU 0.875 → suppressed
    put(5000, BOX, 3, 0.8)  # same place, other class → kept
    put(8000, [10, 10, 50, 50], 1, 0.2)  # below threshold → dropped
    return boxes, scores


def test_split_layout_decodes_planted_boxes() -> None:
    boxes, scores = planted_split()
    assert detect_layout([boxes.shape, scores.shape]) == "split"
    for outputs in ([boxes, scores], [scores, boxes]):  # output order does not matter
        dets = postprocess(outputs)
        assert dets.shape == (2, 6)
        np.testing.assert_allclose(dets[:, :4], [BOX, BOX], atol=1.0)
        np.testing.assert_allclose(dets[:, 4:], [[0.9, 7], [0.8, 3]], atol=1e-6)


def test_concat_layout_matches_split() -> None:
    boxes, scores = planted_split()
    single = np.concatenate([boxes, scores], axis=1)
    assert detect_layout([single.shape]) == "concat"
    np.testing.assert_allclose(postprocess([single]), postprocess([boxes, scores]))


@pytest.mark.parametrize(
    "shapes",
    [
        [(1, 10, 10)],
        [(1, 4, 8400), (1, 80, 8000)],
        [(1, 64, 80, 80), (1, 80, 40, 40), (1, 1, 80, 80)],
        [(1, 63, 80, 80), (1, 80, 80, 80), (1, 1, 80, 80)],
        [(1, 3, 640, 640)],
        [],
    ],
)
def test_unknown_shapes_raise_an_error_naming_them(shapes) -> None:
    with pytest.raises(LayoutError) as info:
        detect_layout(shapes)
    for shape in shapes:
        assert "[" + ",".join(str(d) for d in shape) + "]" in str(info.value)
    with pytest.raises(ValueError):
        postprocess([np.zeros(s, np.float32) for s in shapes])


def test_integer_outputs_need_quantization_parameters() -> None:
    boxes, scores = planted_split()
    scale, zero = 1 / 255, -128
    q_scores = np.clip(np.round(scores / scale) + zero, -128, 127).astype(np.int8)
    np.testing.assert_allclose(dequantize(q_scores, scale, zero), scores, atol=scale)
    dets = postprocess([boxes, q_scores], quant=[None, (scale, zero)])
    np.testing.assert_allclose(dets[:, :4], [BOX, BOX], atol=1.0)
    np.testing.assert_allclose(dets[:, 4], [0.9, 0.8], atol=scale)
    with pytest.raises(ValueError, match="scale, zero_point"):
        postprocess([boxes, q_scores])


def test_nms_is_per_class_and_keeps_the_best_first() -> None:
    boxes = np.array([[0, 0, 10, 10], [1, 0, 11, 10], [0, 0, 10, 10], [20, 20, 30, 30]], np.float32)
    scores = np.array([0.5, 0.9, 0.7, 0.3], np.float32)
    classes = np.array([0, 0, 1, 0])
    assert nms(boxes, scores, classes, 0.45, 100).tolist() == [1, 2, 3]
    assert nms(boxes, scores, classes, 0.45, 2).tolist() == [1, 2]
    # IoU of boxes 0 and 1 is 9/11 ≈ 0.82: kept at an IoU threshold above that.
    assert nms(boxes, scores, classes, 0.85, 100).tolist() == [1, 2, 0, 3]


def test_many_random_candidates_stay_bounded_sorted_and_inside() -> None:
    rng = np.random.default_rng(0)
    boxes = np.stack([rng.uniform(-50, 690, 8400), rng.uniform(-50, 690, 8400)]).astype(np.float32)
    boxes = np.concatenate([boxes, rng.uniform(5, 200, (2, 8400)).astype(np.float32)])[None]
    scores = rng.uniform(0, 0.5, (1, NC, 8400)).astype(np.float32)
    dets = postprocess([boxes, scores], max_detections=300)
    assert 0 < len(dets) <= 300
    assert np.all(np.diff(dets[:, 4]) <= 0)
    assert dets[:, :4].min() >= 0 and dets[:, :4].max() <= 640
    assert dets[:, 4].min() >= 0.25
