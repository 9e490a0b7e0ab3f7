"""YOLOv8 post-processing in numpy: decode, threshold, per-class NMS.

Two output layouts are understood, told apart by their shapes (:func:`detect_layout`):

* ``zoo`` — the rknn_model_zoo export, 2 or 3 outputs per stride (8, 16, 32 → H = W = 80, 40, 20):
  box DFL logits [1, 4·16, H, W], class probabilities [1, C, H, W] (already sigmoid-ed), and
  optionally the clipped class-probability sum [1, 1, H, W] (unused here: it is only a pre-filter).
  NHWC copies ([1, H, W, 64] …) are accepted too. Box sides come from a softmax over 16 bins weighted
  0..15; x1 = (gx + 0.5 − l)·s, y1 = (gy + 0.5 − t)·s, x2 = (gx + 0.5 + r)·s, y2 = (gy + 0.5 + b)·s.
* ``split`` — npudure's own export (``npudure model build --layout split``): boxes [1, 4, A] as
  (cx, cy, w, h) in input pixels, already DFL-decoded, and class probabilities [1, C, A]. The
  ultralytics single-output export [1, 4 + C, A] is read the same way (layout ``concat``).

Any class count C ≥ 1 and any square input size (a multiple of 32; the zoo's strides are input / H)
are read: pass ``input_size`` (the model's, never assumed: the backends read it from the model).

Result: (N, 6) float32 rows ``x1, y1, x2, y2, score, class_id`` in input pixels, clipped to the
image, score = best class probability, sorted by score (highest first), at most ``max_detections``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

import numpy as np

from npudure.vision.frames import INPUT_SIZE

if TYPE_CHECKING:
    from npudure.config import PostprocessConfig

Layout = Literal["zoo", "split", "concat"]
LAYOUTS: tuple[Layout, ...] = ("zoo", "split", "concat")
REG_MAX = 16
MAX_NMS_CANDIDATES = 30000  # like ultralytics: beyond this the frame is noise, keep the best
# Up to this many candidates NMS computes their IoU matrix at once (256² float64: 0.5 MB).
NMS_MATRIX_MAX = 256
_EMPTY = np.zeros((0, 6), dtype=np.float32)


class LayoutError(ValueError):
    """The outputs match no known YOLOv8 layout."""


def _shapes_text(shapes: Sequence[Sequence[object]]) -> str:
    return ", ".join("[" + ",".join(str(d) for d in s) + "]" for s in shapes)


def _zoo_groups(shapes: Sequence[Sequence[int]]) -> tuple[int, bool] | None:
    """(outputs per stride, nhwc) if ``shapes`` is a zoo layout, else None."""
    for per in (3, 2):
        if len(shapes) % per or not len(shapes) // per:
            continue
        groups = [shapes[i : i + per] for i in range(0, len(shapes), per)]
        for nhwc in (False, True):
            ok = True
            for group in groups:
                if any(len(s) != 4 or s[0] != 1 for s in group):
                    ok = False
                    break
                c_axis, hw = (3, (1, 2)) if nhwc else (1, (2, 3))
                box, cls = group[0], group[1]
                size = tuple(box[a] for a in hw)
                if (
                    box[c_axis] != 4 * REG_MAX
                    or size[0] != size[1]
                    or any(tuple(s[a] for a in hw) != size for s in group)
                    or cls[c_axis] < 1
                    or (per == 3 and group[2][c_axis] != 1)
                ):
                    ok = False
                    break
            if ok:
                return per, nhwc
    return None


def zoo_groups(shapes: Sequence[Sequence[int]]) -> tuple[int, bool] | None:
    """(outputs per stride: 2 or 3, NHWC?) if ``shapes`` are the zoo layout, else None."""
    return _zoo_groups(shapes)


def detect_layout(shapes: Sequence[Sequence[int]]) -> Layout:
    """Which layout the outputs with these shapes are in; LayoutError naming the shapes if none."""
    shapes = [tuple(int(d) if isinstance(d, (int, np.integer)) else -1 for d in s) for s in shapes]
    if len(shapes) == 2 and all(len(s) == 3 and s[0] == 1 for s in shapes):
        (_, c0, a0), (_, c1, a1) = shapes
        if a0 == a1 and a0 > 0 and 4 in (c0, c1) and min(c0, c1) >= 1:
            return "split"
    if len(shapes) == 1 and len(shapes[0]) == 3 and shapes[0][0] == 1 and 4 < shapes[0][1] < shapes[0][2]:
        return "concat"
    if _zoo_groups(shapes) is not None:
        return "zoo"
    raise LayoutError(
        f"cannot read YOLOv8 outputs with shapes {_shapes_text(shapes)}: expected 'split' "
        "(boxes [1,4,A] and scores [1,C,A]), 'concat' ([1,4+C,A]) or 'zoo' (per stride 8/16/32: "
        "[1,64,H,W], [1,C,H,W] and optionally [1,1,H,W]); rebuild the model with `npudure model build` "
        "or export it in one of these layouts"
    )


def dequantize(tensor: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    """Integer (int8/uint8) output → float32 with the tensor's affine quantization parameters."""
    return (tensor.astype(np.float32) - np.float32(zero_point)) * np.float32(scale)


def _floats(
    outputs: Sequence[np.ndarray], quant: Sequence[tuple[float, int] | None] | None
) -> list[np.ndarray]:
    result = []
    for i, out in enumerate(outputs):
        out = np.asarray(out)
        params = quant[i] if quant is not None and i < len(quant) else None
        if params is not None:
            out = dequantize(out, *params)
        elif np.issubdtype(out.dtype, np.integer):
            raise ValueError(
                f"output {i} is {out.dtype}: pass its (scale, zero_point) in quant= or ask the runtime "
                "for float outputs"
            )
        result.append(out.astype(np.float32, copy=False))
    return result


def _dfl(logits: np.ndarray) -> np.ndarray:
    """[4, 16, K] DFL logits → [4, K] expected bin (distance in strides)."""
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    bins = np.arange(REG_MAX, dtype=np.float32)[None, :, None]
    expected: np.ndarray = (e * bins).sum(axis=1) / e.sum(axis=1)  # numpy types the ufunc result Any
    return expected


def _zoo_candidates(
    outputs: list[np.ndarray], threshold: float, input_size: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    found = _zoo_groups([o.shape for o in outputs])
    assert found is not None
    per, nhwc = found
    boxes, scores, classes = [], [], []
    for i in range(0, len(outputs), per):
        box, cls = outputs[i][0], outputs[i + 1][0]
        if nhwc:
            box, cls = box.transpose(2, 0, 1), cls.transpose(2, 0, 1)
        _, h, w = box.shape
        stride = input_size / h
        cls = cls.reshape(cls.shape[0], -1)
        best = cls.max(axis=0)
        keep = np.flatnonzero(best >= threshold)
        if not keep.size:
            continue
        dist = _dfl(box.reshape(4, REG_MAX, -1)[:, :, keep])  # l, t, r, b
        gx, gy = keep % w + 0.5, keep // w + 0.5
        xyxy = np.stack([gx - dist[0], gy - dist[1], gx + dist[2], gy + dist[3]], axis=1) * stride
        boxes.append(xyxy)
        scores.append(best[keep])
        classes.append(cls[:, keep].argmax(axis=0))
    if not boxes:
        return np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros(0, np.int64)
    return np.concatenate(boxes), np.concatenate(scores), np.concatenate(classes)


def _split_candidates(
    boxes: np.ndarray, cls: np.ndarray, threshold: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    best = cls.max(axis=0)
    keep = np.flatnonzero(best >= threshold)
    cx, cy, w, h = boxes[:, keep]
    xyxy = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1)
    return xyxy, best[keep], cls[:, keep].argmax(axis=0)


def nms(
    boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray, iou_threshold: float, max_keep: int
) -> np.ndarray:
    """Indices kept by greedy per-class NMS, best score first (at most ``max_keep``).

    Per class by shifting each class's boxes to their own region of the plane, so boxes of
    different classes never overlap and one pass does all classes.
    """
    if not len(scores):
        return np.zeros(0, dtype=np.int64)
    span = float(np.abs(boxes).max()) * 2 + 1
    shifted = boxes.astype(np.float64) + (classes.astype(np.float64) * span)[:, None]
    x1, y1, x2, y2 = shifted.T
    areas = np.maximum(x2 - x1, 0) * np.maximum(y2 - y1, 0)
    order = np.argsort(-scores, kind="stable")
    if len(order) <= NMS_MATRIX_MAX:
        return _nms_matrix(
            x1[order], y1[order], x2[order], y2[order], areas[order], order, iou_threshold, max_keep
        )
    keep: list[int] = []
    while order.size and len(keep) < max_keep:
        i = int(order[0])
        keep.append(i)
        rest = order[1:]
        w = np.clip(np.minimum(x2[i], x2[rest]) - np.maximum(x1[i], x1[rest]), 0, None)
        h = np.clip(np.minimum(y2[i], y2[rest]) - np.maximum(y1[i], y1[rest]), 0, None)
        inter = w * h
        iou = inter / np.maximum(areas[i] + areas[rest] - inter, 1e-9)
        order = rest[iou <= iou_threshold]
    return np.asarray(keep, dtype=np.int64)


def _nms_matrix(
    x1: np.ndarray,
    y1: np.ndarray,
    x2: np.ndarray,
    y2: np.ndarray,
    areas: np.ndarray,
    order: np.ndarray,
    iou_threshold: float,
    max_keep: int,
) -> np.ndarray:
    """:func:`nms`'s greedy pass with every IoU computed at once (boxes already in score order).

    Each IoU is the same float64 expression as the pairwise loop's (min/max and + are symmetric), so
    the kept set is the same: a box survives when no earlier kept box overlaps it past the threshold.
    One numpy call per kept box instead of ~8 (the loop's cost at ~25-50).
    """
    if max_keep <= 0:
        return np.zeros(0, dtype=np.int64)
    w = np.clip(np.minimum(x2[:, None], x2[None]) - np.maximum(x1[:, None], x1[None]), 0, None)
    h = np.clip(np.minimum(y2[:, None], y2[None]) - np.maximum(y1[:, None], y1[None]), 0, None)
    inter = w * h
    iou = inter / np.maximum(areas[:, None] + areas[None] - inter, 1e-9)
    # "not <=" rather than ">": a NaN IoU suppresses, as the loop's ``iou <= threshold`` filter does.
    over = ~(iou <= iou_threshold)
    removed = np.zeros(len(order), dtype=bool)
    keep: list[int] = []
    for k in range(len(order)):
        if removed[k]:
            continue
        keep.append(k)
        if len(keep) >= max_keep:
            break
        removed |= over[k]  # boxes before k are decided already; k itself is kept
    return order[np.asarray(keep, dtype=np.int64)]


def postprocess(
    outputs: Sequence[np.ndarray],
    score_threshold: float = 0.25,
    iou_threshold: float = 0.45,
    max_detections: int = 300,
    layout: Layout | None = None,
    input_size: int = INPUT_SIZE,
    quant: Sequence[tuple[float, int] | None] | None = None,
) -> np.ndarray:
    """Raw YOLOv8 outputs → (N, 6) float32 detections ``x1, y1, x2, y2, score, class_id``.

    ``quant`` gives (scale, zero_point) per output for integer outputs; float outputs need none.
    """
    outs = _floats(outputs, quant)
    if layout is None:
        layout = detect_layout([o.shape for o in outs])
    if layout == "zoo":
        boxes, scores, classes = _zoo_candidates(outs, score_threshold, input_size)
    elif layout == "split":
        box_out, cls_out = (outs[0], outs[1]) if outs[0].shape[1] == 4 else (outs[1], outs[0])
        boxes, scores, classes = _split_candidates(box_out[0], cls_out[0], score_threshold)
    elif layout == "concat":
        boxes, scores, classes = _split_candidates(outs[0][0, :4], outs[0][0, 4:], score_threshold)
    else:
        raise LayoutError(f"unknown layout {layout!r}; use one of: {', '.join(LAYOUTS)}")
    if not len(scores):
        return _EMPTY.copy()
    if len(scores) > MAX_NMS_CANDIDATES:
        top = np.argpartition(-scores, MAX_NMS_CANDIDATES)[:MAX_NMS_CANDIDATES]
        boxes, scores, classes = boxes[top], scores[top], classes[top]
    # NMS on the boxes as decoded, clipped afterwards (as ultralytics does: clipping first changes the
    # overlap of boxes that reach past the image, and with it which of them survive).
    keep = nms(boxes, scores, classes, iou_threshold, max_detections)
    result = np.empty((len(keep), 6), dtype=np.float32)
    result[:, :4] = np.clip(boxes[keep], 0, input_size)
    result[:, 4] = scores[keep]
    result[:, 5] = classes[keep]
    return result


def postprocess_with(
    outputs: Sequence[np.ndarray],
    config: PostprocessConfig,
    layout: Layout | None = None,
    input_size: int = INPUT_SIZE,
) -> np.ndarray:
    """:func:`postprocess` with the thresholds of an agent's ``postprocess:`` config section."""
    return postprocess(
        outputs,
        score_threshold=config.score_threshold,
        iou_threshold=config.iou_threshold,
        max_detections=config.max_detections,
        layout=layout,
        input_size=input_size,
    )


def num_classes(shapes: Sequence[Sequence[int]]) -> int:
    """The class count the outputs with these shapes carry (any layout :func:`detect_layout` reads)."""
    shapes = [tuple(int(d) for d in s) for s in shapes]
    layout = detect_layout(shapes)
    if layout == "concat":
        return shapes[0][1] - 4
    if layout == "split":
        (_, c0, _), (_, c1, _) = shapes
        return c1 if c0 == 4 else c0
    _, nhwc = _zoo_groups(shapes) or (3, False)
    return shapes[1][3 if nhwc else 1]
