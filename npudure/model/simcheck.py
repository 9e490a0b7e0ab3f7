"""Does the .rknn compute what the ONNX model computes? Compare the toolkit simulator's 9 outputs with
ONNX Runtime's on the same frames, raw (cosine similarity, max abs error per output) and after OUR
post-processing (npudure/vision/postprocess.py): detections matched by class and IoU.

The untrained model gives a steady few dozen detections per frame at the agent's 0.25 threshold
(docs/model.md), so the decoded comparison has real boxes to match. A permuted or transposed output, a
wrong layout or a broken decoder drops the match rate far below the bar.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from npudure.vision.frames import INPUT_SIZE
from npudure.vision.postprocess import LayoutError, detect_layout, postprocess

MATCH_IOU = 0.5
SCORE_THRESHOLD = 0.25
# Bars for "the .rknn matches": INT8 of an untrained network moves scores near the threshold, so a few
# detections appear or vanish; a layout or decoding error loses almost all of them.
MIN_MATCH_RATE = 0.5
MIN_COSINE = 0.9


@dataclass(frozen=True)
class OutputError:
    index: int
    shape: tuple[int, ...]
    cosine: float  # over all frames, flattened
    max_abs: float
    ref_max_abs: float  # the ONNX output's own range, to read max_abs against


@dataclass
class CheckResult:
    frames: int
    score_threshold: float
    outputs: list[OutputError] = field(default_factory=list)
    onnx_detections: int = 0
    rknn_detections: int = 0
    matched: int = 0
    problem: str = ""  # set when the outputs could not be compared at all
    # Per class id: [ONNX detections, RKNN detections, matched].
    per_class: dict[int, list[int]] = field(default_factory=dict)
    names: Sequence[str] | None = None

    @property
    def match_rate(self) -> float:
        """Matched pairs over the mean count (1.0 = the same detections on both sides)."""
        total = self.onnx_detections + self.rknn_detections
        return 2 * self.matched / total if total else 0.0

    @property
    def min_cosine(self) -> float:
        return min((o.cosine for o in self.outputs), default=0.0)

    @property
    def passed(self) -> bool:
        return (
            not self.problem
            and self.onnx_detections > 0
            and self.match_rate >= MIN_MATCH_RATE
            and self.min_cosine >= MIN_COSINE
        )

    def lines(self) -> list[str]:
        if self.problem:
            return [f"check   FAILED: {self.problem}"]
        out = [
            f"check   {self.frames} frames, score >= {self.score_threshold}: {self.matched} detections "
            f"matched (class + IoU >= {MATCH_IOU}) of {self.onnx_detections} ONNX / "
            f"{self.rknn_detections} RKNN; "
            f"match rate {self.match_rate:.1%}",
        ]
        for cid in sorted(self.per_class):
            ref, got, hit = self.per_class[cid]
            name = self.names[cid] if self.names and cid < len(self.names) and self.names[cid] else ""
            rate = 2 * hit / (ref + got) if ref + got else 0.0
            out.append(
                f"class   {cid}{f' {name!r}' if name else ''}: {hit} matched of {ref} ONNX / {got} RKNN "
                f"({rate:.0%})"
            )
        for o in self.outputs:
            out.append(
                f"output  {o.index} [{','.join(map(str, o.shape))}] cosine {o.cosine:.4f}, max abs error "
                f"{o.max_abs:.4g} (ONNX range {o.ref_max_abs:.4g})"
            )
        verdict = "PASSED" if self.passed else "FAILED"
        out.append(
            f"check   {verdict} (bars: match rate >= {MIN_MATCH_RATE:.0%}, "
            f"every output cosine >= {MIN_COSINE})"
        )
        return out


def onnx_outputs(onnx_path: Path, frames: np.ndarray, threads: int = 2) -> list[list[np.ndarray]]:
    """ONNX Runtime's outputs per frame (uint8 NHWC frames in, as the NPU gets them)."""
    import onnxruntime as ort

    from npudure.model.calibrate import to_nchw

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.log_severity_level = 3
    session = ort.InferenceSession(str(onnx_path), opts, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return [session.run(None, {name: to_nchw([f])}) for f in frames]


def _iou(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    w = np.clip(np.minimum(box[2], boxes[:, 2]) - np.maximum(box[0], boxes[:, 0]), 0, None)
    h = np.clip(np.minimum(box[3], boxes[:, 3]) - np.maximum(box[1], boxes[:, 1]), 0, None)
    inter = w * h
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    return inter / np.maximum(area + areas - inter, 1e-9)


def match_detections(
    ref: np.ndarray, got: np.ndarray, iou: float = MATCH_IOU, per_class: dict[int, int] | None = None
) -> int:
    """Greedy one-to-one matching, best reference score first: same class and IoU >= ``iou``
    (``per_class`` is given the matches by class id)."""
    used = np.zeros(len(got), dtype=bool)
    matched = 0
    for row in ref[np.argsort(-ref[:, 4], kind="stable")]:
        candidates = np.flatnonzero(~used & (got[:, 5] == row[5]))
        if not candidates.size:
            continue
        ious = _iou(row[:4], got[candidates, :4])
        best = int(np.argmax(ious))
        if ious[best] >= iou:
            used[candidates[best]] = True
            matched += 1
            if per_class is not None:
                per_class[int(row[5])] = per_class.get(int(row[5]), 0) + 1
    return matched


def compare(
    ref: Sequence[Sequence[np.ndarray]],
    got: Sequence[Sequence[np.ndarray]],
    score_threshold: float = SCORE_THRESHOLD,
    input_size: int = INPUT_SIZE,
    names: Sequence[str] | None = None,
) -> CheckResult:
    """Compare per-frame output lists: ``ref`` from ONNX Runtime, ``got`` from the simulator."""
    result = CheckResult(frames=len(ref), score_threshold=score_threshold, names=names)
    if len(ref) != len(got) or not ref:
        result.problem = f"{len(ref)} ONNX frames but {len(got)} simulator frames"
        return result
    ref_shapes = [tuple(np.shape(o)) for o in ref[0]]
    got_shapes = [tuple(np.shape(o)) for o in got[0]]
    if ref_shapes != got_shapes:
        result.problem = (
            f"the .rknn's outputs are {got_shapes}, the ONNX model's {ref_shapes}: the output layout "
            "changed in conversion"
        )
        return result
    try:
        detect_layout(got_shapes)
    except LayoutError as exc:
        result.problem = str(exc)
        return result
    for j, shape in enumerate(ref_shapes):
        a = np.concatenate([np.asarray(f[j], np.float64).ravel() for f in ref])
        b = np.concatenate([np.asarray(f[j], np.float64).ravel() for f in got])
        cosine = float(a @ b / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-12))
        result.outputs.append(
            OutputError(j, shape, cosine, float(np.abs(a - b).max()), float(np.abs(a).max()))
        )
    for r, g in zip(ref, got, strict=True):
        dr = postprocess(list(r), score_threshold=score_threshold, input_size=input_size)
        dg = postprocess(list(g), score_threshold=score_threshold, input_size=input_size)
        result.onnx_detections += len(dr)
        result.rknn_detections += len(dg)
        hits: dict[int, int] = {}
        result.matched += match_detections(dr, dg, per_class=hits)
        for col, dets in ((0, dr), (1, dg)):
            for cid in dets[:, 5].astype(int).tolist():
                result.per_class.setdefault(cid, [0, 0, 0])[col] += 1
        for cid, n in hits.items():
            result.per_class.setdefault(cid, [0, 0, 0])[2] += n
    if result.onnx_detections == 0:
        result.problem = (
            f"the ONNX model gave no detection at score >= {score_threshold} on these frames: nothing to "
            "compare (lower --check-threshold)"
        )
    return result


def load_sim_outputs(npz: Path, frames: int) -> list[list[np.ndarray]]:
    """The worker's ``f{i}_o{j}`` arrays back as per-frame lists."""
    with np.load(npz) as data:
        per = len([k for k in data.files if k.startswith("f0_")])
        return [[data[f"f{i}_o{j}"] for j in range(per)] for i in range(frames)]


__all__ = [
    "CheckResult",
    "OutputError",
    "compare",
    "load_sim_outputs",
    "match_detections",
    "onnx_outputs",
]
