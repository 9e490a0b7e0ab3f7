"""NMS over the IoU matrix keeps exactly what the pairwise greedy loop keeps (bit-identical results)."""

from __future__ import annotations

import numpy as np
import pytest

from npudure.vision import postprocess as pp


def _random_head(rng: np.random.Generator, layout: str, classes: int = 80) -> list[np.ndarray]:
    """A YOLOv8-shaped head with a few dozen candidates above 0.25, many overlapping."""
    if layout == "split":
        anchors = 8400
        cx, cy = rng.uniform(0, 640, (2, anchors))
        w, h = rng.uniform(5, 300, (2, anchors))
        boxes = np.stack([cx, cy, w, h])[None].astype(np.float32)
        probs = rng.uniform(0, 0.2, (1, classes, anchors)).astype(np.float32)
        hot = rng.choice(anchors, int(rng.integers(0, 80)), replace=False)
        probs[0, rng.integers(0, classes, hot.size), hot] = rng.uniform(0.2, 1.0, hot.size)
        # Duplicates around a few hot anchors: what NMS exists for.
        for a in hot[:10]:
            near = rng.choice(anchors, 5, replace=False)
            boxes[0, :, near] = boxes[0, :, a] + rng.normal(0, 4, (5, 4)).astype(np.float32)
            probs[0, :, near] = probs[0, :, a] * rng.uniform(0.9, 1.0, (5, 1)).astype(np.float32)
        return [boxes, probs]
    outs = []
    for side in (80, 40, 20):
        outs.append(rng.normal(0, 2, (1, 64, side, side)).astype(np.float32))
        probs = rng.uniform(0, 0.3, (1, classes, side, side)).astype(np.float32)
        outs.append(probs)
        outs.append(np.clip(probs.sum(axis=1, keepdims=True), 0, 1))
    return outs


@pytest.mark.parametrize("layout", ["split", "zoo"])
def test_postprocess_is_bit_identical_to_the_loop_on_100_seeded_heads(layout, monkeypatch) -> None:
    rng = np.random.default_rng(20)
    heads = [_random_head(rng, layout) for _ in range(100)]
    fast = [pp.postprocess(h) for h in heads]
    monkeypatch.setattr(pp, "NMS_MATRIX_MAX", 0)  # every call takes the pairwise loop
    slow = [pp.postprocess(h) for h in heads]
    assert sum(len(d) for d in slow) > 100  # the heads do have detections to compare
    for a, b in zip(fast, slow, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("seed", range(30))
def test_nms_matrix_matches_the_loop_with_ties_classes_and_limits(seed, monkeypatch) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, pp.NMS_MATRIX_MAX + 1))
    xy = rng.uniform(0, 100, (n, 2))
    boxes = np.concatenate([xy, xy + rng.uniform(0, 40, (n, 2))], axis=1).astype(np.float32)
    if seed % 5 == 0:
        boxes[rng.integers(0, n)] = np.nan  # a broken output: both must suppress alike
    scores = rng.choice([0.3, 0.5, 0.7, 0.9], n).astype(np.float32)  # many ties: order must hold
    classes = rng.integers(0, 3, n)
    iou, keep_max = float(rng.choice([0.0, 0.3, 0.45, 0.7, 1.0])), int(rng.choice([0, 1, 5, 300]))
    fast = pp.nms(boxes, scores, classes, iou, keep_max)
    monkeypatch.setattr(pp, "NMS_MATRIX_MAX", 0)
    slow = pp.nms(boxes, scores, classes, iou, keep_max)
    assert fast.dtype == slow.dtype and fast.tolist() == slow.tolist()
