"""Post-processing at any class count (1, 2, 80) and input size (320, 640), in every layout.

The same planted boxes are written into a zoo split layout (per stride: DFL logits, class
probabilities, score sum), the project's split layout and the standard ultralytics single output
``(1, 4 + nc, N)``; each must decode to the boxes planted, in the input's pixels, with the class planted.
"""

from __future__ import annotations

import numpy as np
import pytest

from npudure.vision.postprocess import detect_layout, num_classes, postprocess

STRIDES = (8, 16, 32)
BIG = 30.0  # a DFL logit this far above the others makes its softmax one-hot
CASES = [(nc, size) for nc in (1, 2, 80) for size in (320, 640)]


def anchors(size: int) -> list[tuple[int, int, int]]:
    """(stride, gx, gy) of every anchor, in the order the single-output export lists them."""
    return [(s, gx, gy) for s in STRIDES for gy in range(size // s) for gx in range(size // s)]


def plants(nc: int, size: int) -> list[tuple[int, int, int, tuple[int, int, int, int], int, float]]:
    """(stride, gx, gy, ltrb in strides, class, prob): two boxes far apart, one below the threshold."""
    last = nc - 1
    return [
        (16, 4, 5, (3, 2, 4, 5), last, 0.9),  # the highest class id there is
        (8, size // 8 - 6, size // 8 - 6, (2, 3, 2, 3), 0, 0.7),  # near the bottom-right corner
        (32, 2, 2, (1, 1, 1, 1), 0, 0.1),  # below 0.25: dropped
    ]


def expected(nc: int, size: int) -> np.ndarray:
    rows = []
    for s, gx, gy, (left, t, r, b), cls, prob in plants(nc, size):
        if prob >= 0.25:
            box = [(gx + 0.5 - left) * s, (gy + 0.5 - t) * s, (gx + 0.5 + r) * s, (gy + 0.5 + b) * s]
            rows.append([*box, prob, cls])
    return np.array(rows, np.float32)


def zoo_outputs(nc: int, size: int) -> list[np.ndarray]:
    outs = []
    for s in STRIDES:
        hw = size // s
        outs += [
            np.zeros((1, 64, hw, hw), np.float32),
            np.full((1, nc, hw, hw), 0.01, np.float32),
            np.zeros((1, 1, hw, hw), np.float32),
        ]
    for s, gx, gy, ltrb, cls, prob in plants(nc, size):
        box, scores, total = outs[3 * STRIDES.index(s) : 3 * STRIDES.index(s) + 3]
        for side, dist in enumerate(ltrb):
            logits = np.full(16, -BIG, np.float32)
            logits[dist] = BIG
            box[0, side * 16 : (side + 1) * 16, gy, gx] = logits
        scores[0, cls, gy, gx] = prob
        total[0, 0, gy, gx] = min(float(scores[0, :, gy, gx].sum()), 1.0)
    return outs


def boxes_and_scores(nc: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """The decoded form: boxes [1,4,A] (cx, cy, w, h pixels) and scores [1,nc,A]."""
    index = {a: i for i, a in enumerate(anchors(size))}
    boxes = np.zeros((1, 4, len(index)), np.float32)
    boxes[0, 2:] = 4.0  # small boxes everywhere, under the threshold
    scores = np.full((1, nc, len(index)), 0.01, np.float32)
    for s, gx, gy, (left, t, r, b), cls, prob in plants(nc, size):
        i = index[(s, gx, gy)]
        x1, y1, x2, y2 = (gx + 0.5 - left) * s, (gy + 0.5 - t) * s, (gx + 0.5 + r) * s, (gy + 0.5 + b) * s
        boxes[0, :, i] = [(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1]
        scores[0, cls, i] = prob
    return boxes, scores


def layouts(nc: int, size: int) -> dict[str, list[np.ndarray]]:
    boxes, scores = boxes_and_scores(nc, size)
    return {
        "zoo": zoo_outputs(nc, size),
        "split": [boxes, scores],
        "concat": [np.concatenate([boxes, scores], axis=1)],
    }


@pytest.mark.parametrize(("nc", "size"), CASES)
@pytest.mark.parametrize("layout", ["zoo", "split", "concat"])
def test_planted_boxes_decode_at_any_class_count_and_size(layout: str, nc: int, size: int) -> None:
    outs = layouts(nc, size)[layout]
    shapes = [o.shape for o in outs]
    assert detect_layout(shapes) == layout
    assert num_classes(shapes) == nc
    dets = postprocess(outs, input_size=size)
    want = expected(nc, size)
    assert dets.shape == want.shape
    np.testing.assert_allclose(dets[:, :4], want[:, :4], atol=0.5)
    np.testing.assert_allclose(dets[:, 4], want[:, 4], atol=1e-5)
    np.testing.assert_array_equal(dets[:, 5], want[:, 5])
    assert dets[:, :4].max() <= size


def test_single_output_of_one_class_is_not_mistaken_for_split() -> None:
    """(1, 5, N): four box rows and one class row in one tensor."""
    boxes, scores = boxes_and_scores(1, 320)
    assert detect_layout([(1, 5, boxes.shape[2])]) == "concat"
    dets = postprocess([np.concatenate([boxes, scores], axis=1)], input_size=320)
    assert set(dets[:, 5].tolist()) == {0.0}


def test_zoo_at_320_decoded_as_640_puts_boxes_elsewhere() -> None:
    """The input size matters for the zoo layout (strides are input / H): the wrong size is caught."""
    outs = zoo_outputs(2, 320)
    right = postprocess(outs, input_size=320)
    wrong = postprocess(outs, input_size=640)
    assert not np.allclose(right[:, :4], wrong[:, :4], atol=1.0)
