"""Does the .rknn compute what the ONNX model computes? Compare the toolkit simulator's outputs with
ONNX Runtime's on the same frames, after OUR post-processing (npudure/vision/postprocess.py):
detections matched by class and IoU, overall and per class, with a 95% interval over frames; and raw,
per output (cosine similarity, max abs error).

What fails a model is what changes its answers: detections that disagree, or an output that sets boxes
or scores (DFL logits, class probabilities) drifting below the cosine bar. The zoo layout's score sum
is reported but never judged: npudure's post-processing takes the best class score from the class
probabilities on the CPU and never reads it (docs/architecture.md, ADR "score sum"). A permuted or
transposed output, a wrong layout or a broken decoder drops the match rate far below the bar.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from npudure.vision.frames import INPUT_SIZE
from npudure.vision.postprocess import LayoutError, detect_layout, postprocess, zoo_groups

MATCH_IOU = 0.5
SCORE_THRESHOLD = 0.25
# Bars for "the .rknn matches": INT8 of an untrained network moves scores near the threshold, so a few
# detections appear or vanish; a layout or decoding error loses almost all of them.
MIN_MATCH_RATE = 0.5
MIN_COSINE = 0.9
# Below this many frames the interval is too wide to mean much: the check says so (it still runs).
ENOUGH_FRAMES = 50
# A class is judged on its own from this many ONNX detections (fewer: reported, not judged).
MIN_CLASS_DETECTIONS = 10
BOOTSTRAP_RESAMPLES = 2000

# What each output does, by its place in the zoo layout's per-stride group.
BOXES, SCORES, SCORE_SUM = "boxes", "class scores", "score sum"
JUDGED_ROLES = (BOXES, SCORES)


@dataclass(frozen=True)
class OutputError:
    index: int
    shape: tuple[int, ...]
    cosine: float  # over all frames, flattened
    max_abs: float
    ref_max_abs: float  # the ONNX output's own range, to read max_abs against
    role: str = ""  # BOXES, SCORES or SCORE_SUM ("" when the layout has no roles per output)
    stride: int = 0
    name: str = ""  # the graph's output name (the layer to keep in float, if it comes to that)

    @property
    def judged(self) -> bool:
        return self.role != SCORE_SUM

    @property
    def failed(self) -> bool:
        return self.judged and self.cosine < MIN_COSINE


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
    # Per frame, per class id: (ONNX, RKNN, matched); the interval resamples frames.
    per_frame: list[dict[int, tuple[int, int, int]]] = field(default_factory=list)
    # Where the frames came from, as a phrase ("12 of your images (--images cam/)"), and whether they
    # are the user's own scenes; the advice on failure depends on it.
    source: str = ""
    users_scenes: bool = False

    @property
    def match_rate(self) -> float:
        """Matched pairs over the mean count (1.0 = the same detections on both sides)."""
        total = self.onnx_detections + self.rknn_detections
        return 2 * self.matched / total if total else 0.0

    @property
    def min_cosine(self) -> float:
        return min((o.cosine for o in self.outputs if o.judged), default=0.0)

    def interval(self, cid: int | None = None, level: float = 0.95) -> tuple[float, float]:
        """A percentile bootstrap interval of the match rate (one class's, or all), resampling whole
        frames: detections in one frame move together, so frames are the independent draws."""
        rows = np.array(
            [
                [sum(v[k] for c, v in f.items() if cid is None or c == cid) for k in range(3)]
                for f in self.per_frame
            ],
            dtype=np.float64,
        ).reshape(-1, 3)
        if not len(rows) or rows[:, :2].sum() == 0:
            return 0.0, 0.0
        rng = np.random.default_rng(0)
        picks = rng.integers(0, len(rows), size=(BOOTSTRAP_RESAMPLES, len(rows)))
        sums = rows[picks].sum(axis=1)  # [resamples, 3]
        total = sums[:, 0] + sums[:, 1]
        rates = np.divide(2 * sums[:, 2], total, out=np.zeros(len(total)), where=total > 0)
        lo, hi = np.quantile(rates, [(1 - level) / 2, (1 + level) / 2])
        return float(lo), float(hi)

    def class_rate(self, cid: int) -> float:
        ref, got, hit = self.per_class[cid]
        return 2 * hit / (ref + got) if ref + got else 0.0

    def failing_classes(self) -> list[int]:
        """Classes seen often enough to judge whose detections disagree beyond doubt: even the top of
        their interval is under the bar (80 classes of 10-50 detections each scatter by chance)."""
        return [
            cid
            for cid, (ref, _, _) in sorted(self.per_class.items())
            if ref >= MIN_CLASS_DETECTIONS and self.interval(cid)[1] < MIN_MATCH_RATE
        ]

    @property
    def passed(self) -> bool:
        return (
            not self.problem
            and self.onnx_detections > 0
            and self.match_rate >= MIN_MATCH_RATE
            and not self.failing_classes()
            and not any(o.failed for o in self.outputs)
        )

    def _class_label(self, cid: int) -> str:
        name = self.names[cid] if self.names and cid < len(self.names) and self.names[cid] else ""
        return f"{cid}{f' {name!r}' if name else ''}"

    def lines(self) -> list[str]:
        if self.problem:
            return [f"check   FAILED: {self.problem}"]
        lo, hi = self.interval()
        out = []
        if self.source:
            out.append(f"frames  {self.source}")
        out.append(
            f"check   {self.frames} frames, score >= {self.score_threshold}: {self.matched} detections "
            f"matched (class + IoU >= {MATCH_IOU}) of {self.onnx_detections} ONNX / "
            f"{self.rknn_detections} RKNN; match rate {self.match_rate:.1%} (95% interval over frames "
            f"{lo:.1%}-{hi:.1%})"
        )
        for cid in sorted(self.per_class):
            ref, got, hit = self.per_class[cid]
            clo, chi = self.interval(cid)
            judged = "" if ref >= MIN_CLASS_DETECTIONS else f"; fewer than {MIN_CLASS_DETECTIONS}, not judged"
            out.append(
                f"class   {self._class_label(cid)}: {hit} matched of {ref} ONNX / {got} RKNN "
                f"({self.class_rate(cid):.0%}, interval {clo:.0%}-{chi:.0%}{judged})"
            )
        for o in self.outputs:
            what = f" {o.role}, stride {o.stride}" if o.role else ""
            note = "" if o.judged else " (not judged: npudure takes scores from the class outputs)"
            out.append(
                f"output  {o.index} [{','.join(map(str, o.shape))}]{what}: cosine {o.cosine:.4f}, max abs "
                f"error {o.max_abs:.4g} (ONNX range {o.ref_max_abs:.4g}){note}"
            )
        verdict = "PASSED" if self.passed else "FAILED"
        out.append(
            f"check   {verdict} (bars: match rate >= {MIN_MATCH_RATE:.0%} overall, and within the interval "
            f"for each class with >= {MIN_CLASS_DETECTIONS} detections; box and class-score outputs cosine "
            f">= {MIN_COSINE})"
        )
        if self.frames < ENOUGH_FRAMES:
            out.append(
                f"note    only {self.frames} frames (fewer than {ENOUGH_FRAMES}): the interval is wide; "
                "give more frames with --images DIR"
            )
        return out + [f"next    {line}" for line in self.advice()]

    def reasons(self) -> list[str]:
        """Why the check failed, one phrase each (empty when it passed)."""
        if self.problem:
            return [self.problem]
        found = []
        if self.onnx_detections == 0:
            found.append(f"the ONNX model gave no detection at score >= {self.score_threshold}")
        elif self.match_rate < MIN_MATCH_RATE:
            found.append(f"detections disagree (match rate {self.match_rate:.1%} < {MIN_MATCH_RATE:.0%})")
        for cid in self.failing_classes():
            rate, top = self.class_rate(cid), self.interval(cid)[1]
            found.append(
                f"class {self._class_label(cid)} disagrees ({rate:.1%}, interval up to {top:.1%} < "
                f"{MIN_MATCH_RATE:.0%})"
            )
        for o in self.outputs:
            if o.failed:
                found.append(
                    f"INT8 spoils output {o.index} {o.name or ''} ({o.role}, stride {o.stride}): cosine "
                    f"{o.cosine:.3f} < {MIN_COSINE}".replace("  ", " ")
                )
        return found

    def advice(self) -> list[str]:
        """The next steps when the check failed, the likeliest first."""
        if self.passed or self.problem:
            return []
        if self.onnx_detections == 0:
            return ["lower --check-threshold, or check with frames that show your classes (--images DIR)"]
        steps = []
        spoiled = [o for o in self.outputs if o.failed]
        if spoiled:
            layers = ", ".join(dict.fromkeys(o.name or f"output {o.index}" for o in spoiled))
            steps.append(
                f"keep the layers feeding {layers} out of INT8 with rknn-toolkit2's hybrid quantisation "
                "(hybrid_quantization_step1 custom_hybrid, by hand: docs/model.md)"
            )
        if not self.users_scenes:
            steps.append(
                "calibrate and check on your own scenes: --images DIR with 50+ frames from your cameras "
                "(generic photographs were used)"
            )
        steps.append(
            "calibrate on more frames: --calib-count 100"
            + ("" if self.users_scenes else " with --images DIR")
        )
        return steps


def output_roles(shapes: Sequence[Sequence[int]], input_size: int) -> list[tuple[str, int]]:
    """(role, stride) per output of a zoo layout; ("", 0) each for layouts without roles."""
    found = zoo_groups(shapes)
    if found is None:
        return [("", 0)] * len(shapes)
    per, nhwc = found
    roles = (BOXES, SCORES, SCORE_SUM)[:per]
    h_axis = 1 if nhwc else 2
    return [(roles[i % per], input_size // int(shapes[i - i % per][h_axis])) for i in range(len(shapes))]


def output_names(onnx_path: Path) -> list[str]:
    import onnx

    return [o.name for o in onnx.load(str(onnx_path), load_external_data=False).graph.output]


def onnx_outputs(onnx_path: Path, frames: np.ndarray, threads: int = 2) -> list[list[np.ndarray]]:
    """ONNX Runtime's outputs per frame (uint8 NHWC frames in, as the NPU gets them)."""
    import onnxruntime as ort

    from npudure_workshop.model.calibrate import to_nchw

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
    output_names: Sequence[str] | None = None,
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
    roles = output_roles(ref_shapes, input_size)
    for j, shape in enumerate(ref_shapes):
        a = np.concatenate([np.asarray(f[j], np.float64).ravel() for f in ref])
        b = np.concatenate([np.asarray(f[j], np.float64).ravel() for f in got])
        cosine = float(a @ b / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-12))
        name = output_names[j] if output_names and j < len(output_names) else ""
        result.outputs.append(
            OutputError(j, shape, cosine, float(np.abs(a - b).max()), float(np.abs(a).max()), *roles[j], name)
        )
    for r, g in zip(ref, got, strict=True):
        dr = postprocess(list(r), score_threshold=score_threshold, input_size=input_size)
        dg = postprocess(list(g), score_threshold=score_threshold, input_size=input_size)
        result.onnx_detections += len(dr)
        result.rknn_detections += len(dg)
        hits: dict[int, int] = {}
        result.matched += match_detections(dr, dg, per_class=hits)
        frame: dict[int, list[int]] = {}
        for col, dets in ((0, dr), (1, dg)):
            for cid in dets[:, 5].astype(int).tolist():
                frame.setdefault(cid, [0, 0, 0])[col] += 1
        for cid, n in hits.items():
            frame[cid][2] += n
        for cid, counts in frame.items():
            total = result.per_class.setdefault(cid, [0, 0, 0])
            for k in range(3):
                total[k] += counts[k]
        result.per_frame.append({cid: (c[0], c[1], c[2]) for cid, c in frame.items()})
    if result.onnx_detections == 0:
        result.problem = (
            f"the ONNX model gave no detection at score >= {score_threshold} on these frames: nothing to "
            "compare (lower --check-threshold, or give frames that show your classes with --images DIR)"
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
    "output_names",
    "output_roles",
]
