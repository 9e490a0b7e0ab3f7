"""YOLOv8n written directly as an ONNX graph (no torch, no download).

The architecture is ultralytics' ``yolov8.yaml`` at scale n (depth 0.33, width 0.25, max channels
1024): Conv = Conv2d + BatchNorm + SiLU, C2f, SPPF, an FPN/PAN neck and the anchor-free Detect head
with a 16-bin DFL box branch. The same code emits two graphs:

* ``calib`` mode: every Conv is followed by BatchNorm in *training* form (normalise with the batch's
  own per-channel mean/variance) and the statistics are graph outputs. One ONNX Runtime run over a
  batch of frames therefore re-estimates every BatchNorm layer by layer, exactly as a sequential
  pass would, because each layer already sees its normalised input.
* ``final`` mode: BatchNorm folded into the conv (weight × γ/σ, bias β − μγ/σ), SiLU as x·sigmoid(x),
  and one of three output layouts (see :data:`LAYOUTS`).

Any class count (``Emitter.nc``) and any square input side that is a multiple of 32 (``Emitter.size``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from npudure.vision.frames import INPUT_SIZE

OPSET = 13  # rknn-toolkit2 1.6+ loads it (1.5 wanted <= 12); new enough for Softmax on any axis
INPUT_NAME = "images"
NUM_CLASSES = 80
REG_MAX = 16  # DFL bins per box side
STRIDES = (8, 16, 32)
BN_EPS = 1e-3  # ultralytics' BatchNorm2d eps
# Scale n of yolov8.yaml.
DEPTH, WIDTH, MAX_CHANNELS = 0.33, 0.25, 1024

Layout = Literal["split", "zoo", "standard"]
# split: DFL decoded in the graph → "boxes" [1,4,8400] (cx, cy, w, h in input pixels) and "scores"
#        [1,80,8400] (sigmoid) as two outputs, so INT8 quantization gives each its own scale.
# zoo:   rknn_model_zoo layout, 3 outputs per stride 8/16/32: DFL logits [1,64,H,W], class
#        probabilities [1,80,H,W], clipped class-probability sum [1,1,H,W].
# standard: what `yolo export format=onnx` gives: one output "output0" [1,4+nc,A], boxes (cx, cy, w, h
#        pixels) then class probabilities, made the way ultralytics' Detect head makes it (per-level
#        Concat of box and class maps, Reshape, Concat, Split, DFL, dist2bbox, Sigmoid, Concat), so
#        the converter's graph rewrite is tested on the same structure.
LAYOUTS: tuple[Layout, ...] = ("split", "zoo", "standard")
STANDARD_OUTPUT = "output0"
# Names of the float decode tail of the split layout; INT8 quantization leaves these in float.
DECODE_PREFIX = "decode/"


def channels(c: int) -> int:
    """Output channels of a yaml entry at scale n (ultralytics' make_divisible(min(c, max) * w, 8))."""
    return math.ceil(min(c, MAX_CHANNELS) * WIDTH / 8) * 8


def repeats(n: int) -> int:
    return max(round(n * DEPTH), 1) if n > 1 else n


@dataclass
class ConvStats:
    """Per-channel statistics of one conv's output, and the affine to apply after normalising."""

    mean: np.ndarray
    std: np.ndarray
    gain: float = 1.0
    shift: np.ndarray | float = 0.0


@dataclass
class Emitter:
    """Collects nodes and initializers for one graph. ``weights`` is shared between the two modes."""

    mode: Literal["calib", "final"]
    weights: dict[str, np.ndarray]
    rng: np.random.Generator | None  # draws weights missing from ``weights`` (calib mode)
    stats: dict[str, ConvStats] = field(default_factory=dict)
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    inits: list[onnx.TensorProto] = field(default_factory=list)
    outputs: list[onnx.ValueInfoProto] = field(default_factory=list)
    chans: dict[str, int] = field(default_factory=dict)
    # calib mode: names of the conv outputs whose normalised values are graph outputs too.
    expose: set[str] = field(default_factory=set)
    # γ and β of every Conv+BN block in calib mode (final mode takes them from ``stats``).
    bn_gamma: float = 1.0
    bn_beta: float = 0.0
    nc: int = NUM_CLASSES  # classes
    size: int = INPUT_SIZE  # input side in pixels (a multiple of 32)

    # -- primitives -------------------------------------------------------------------------------
    def const(self, name: str, value: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(self, op: str, inputs: list[str], name: str, n_out: int = 1, **attrs: Any) -> list[str]:
        outs = [f"{name}.{i}" if n_out > 1 else name for i in range(n_out)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=name, **attrs))
        return outs

    def output(self, name: str, shape: list[int | None]) -> None:  # None: a dimension left free
        self.outputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, shape))

    def _weight(self, name: str, cout: int, cin: int, k: int) -> np.ndarray:
        if name not in self.weights:
            assert self.rng is not None, f"no weights for {name}: emit in calib mode first"
            # He-normal: the calibration re-normalises every output, so only the direction matters.
            fan_in = cin * k * k
            w = self.rng.standard_normal((cout, cin, k, k)) * math.sqrt(2.0 / fan_in)
            self.weights[name] = w.astype(np.float32)
        return self.weights[name]

    # -- layers ---------------------------------------------------------------------------------------
    def conv(self, x: str, cout: int, k: int, s: int, name: str, act: bool = True) -> str:
        """Conv2d(k, s, pad k//2) → BatchNorm → SiLU (act) or a plain Conv2d with bias (not act)."""
        cin = self.chans[x]
        w = self._weight(name, cout, cin, k)
        attrs = {"kernel_shape": [k, k], "strides": [s, s], "pads": [k // 2] * 4}
        if self.mode == "calib":
            z = self.node("Conv", [x, self.const(f"{name}.weight", w)], f"{name}.conv", n_out=1, **attrs)[0]
            y = self._batch_norm(z, name, *((self.bn_gamma, self.bn_beta) if act else (1.0, 0.0)))
        else:
            st = self.stats[name]
            scale = (st.gain / st.std).astype(np.float32)
            wf = (w * scale[:, None, None, None]).astype(np.float32)
            bf = (st.shift - st.mean * scale).astype(np.float32)
            inputs = [x, self.const(f"{name}.weight", wf), self.const(f"{name}.bias", bf)]
            y = self.node("Conv", inputs, f"{name}.conv", n_out=1, **attrs)[0]
        if act:
            sig = self.node("Sigmoid", [y], f"{name}.sigmoid")[0]
            y = self.node("Mul", [y, sig], f"{name}.silu")[0]
        self.chans[y] = cout
        return y

    def _batch_norm(self, z: str, name: str, gamma: float, beta: float) -> str:
        axes = [0, 2, 3]
        mean = self.node("ReduceMean", [z], f"{name}.bn.mean", axes=axes, keepdims=1)[0]
        centred = self.node("Sub", [z, mean], f"{name}.bn.centred")[0]
        sq = self.node("Mul", [centred, centred], f"{name}.bn.sq")[0]
        var = self.node("ReduceMean", [sq], f"{name}.bn.var", axes=axes, keepdims=1)[0]
        eps = self.const(f"{name}.bn.eps", np.array(BN_EPS, dtype=np.float32))
        std = self.node("Sqrt", [self.node("Add", [var, eps], f"{name}.bn.var_eps")[0]], f"{name}.bn.std")[0]
        y = self.node("Div", [centred, std], f"{name}.bn.out")[0]
        if gamma != 1.0:
            g = self.const(f"{name}.bn.gamma", np.array(gamma, dtype=np.float32))
            y = self.node("Mul", [y, g], f"{name}.bn.scaled")[0]
        if beta != 0.0:
            b = self.const(f"{name}.bn.beta", np.array(beta, dtype=np.float32))
            y = self.node("Add", [y, b], f"{name}.bn.shifted")[0]
        self.output(mean, [1, None, 1, 1])
        self.output(var, [1, None, 1, 1])
        if name in self.expose:
            self.output(y, [None, None, None, None])
        return y

    def concat(self, xs: list[str], name: str) -> str:
        y = self.node("Concat", xs, name, axis=1)[0]
        self.chans[y] = sum(self.chans[x] for x in xs)
        return y

    def upsample(self, x: str, name: str) -> str:
        scales = self.const(f"{name}.scales", np.array([1, 1, 2, 2], dtype=np.float32))
        y = self.node(
            "Resize",
            [x, "", scales],
            name,
            mode="nearest",
            coordinate_transformation_mode="asymmetric",
            nearest_mode="floor",
        )[0]
        self.chans[y] = self.chans[x]
        return y

    def c2f(self, x: str, cout: int, n: int, shortcut: bool, name: str) -> str:
        c = cout // 2
        y = self.conv(x, 2 * c, 1, 1, f"{name}.cv1")
        split = self.const(f"{name}.split", np.array([c, c], dtype=np.int64))
        parts = self.node("Split", [y, split], f"{name}.chunk", n_out=2, axis=1)
        for p in parts:
            self.chans[p] = c
        for i in range(n):
            prev = parts[-1]
            h = self.conv(prev, c, 3, 1, f"{name}.m.{i}.cv1")
            h = self.conv(h, c, 3, 1, f"{name}.m.{i}.cv2")
            if shortcut:
                h = self.node("Add", [prev, h], f"{name}.m.{i}.add")[0]
                self.chans[h] = c
            parts.append(h)
        return self.conv(self.concat(parts, f"{name}.cat"), cout, 1, 1, f"{name}.cv2")

    def sppf(self, x: str, cout: int, k: int, name: str) -> str:
        c = self.chans[x] // 2
        ys = [self.conv(x, c, 1, 1, f"{name}.cv1")]
        for i in range(3):
            pool = self.node(
                "MaxPool", [ys[-1]], f"{name}.m.{i}", kernel_shape=[k, k], strides=[1, 1], pads=[k // 2] * 4
            )[0]
            self.chans[pool] = c
            ys.append(pool)
        return self.conv(self.concat(ys, f"{name}.cat"), cout, 1, 1, f"{name}.cv2")


def backbone_and_neck(e: Emitter, x: str) -> list[str]:
    """Layers 0-21 of yolov8.yaml; returns the P3, P4, P5 feature maps fed to Detect."""
    c, n = channels, repeats
    x0 = e.conv(x, c(64), 3, 2, "model.0")
    x1 = e.conv(x0, c(128), 3, 2, "model.1")
    x2 = e.c2f(x1, c(128), n(3), True, "model.2")
    x3 = e.conv(x2, c(256), 3, 2, "model.3")
    x4 = e.c2f(x3, c(256), n(6), True, "model.4")
    x5 = e.conv(x4, c(512), 3, 2, "model.5")
    x6 = e.c2f(x5, c(512), n(6), True, "model.6")
    x7 = e.conv(x6, c(1024), 3, 2, "model.7")
    x8 = e.c2f(x7, c(1024), n(3), True, "model.8")
    x9 = e.sppf(x8, c(1024), 5, "model.9")
    x11 = e.concat([e.upsample(x9, "model.10"), x6], "model.11")
    x12 = e.c2f(x11, c(512), n(3), False, "model.12")
    x14 = e.concat([e.upsample(x12, "model.13"), x4], "model.14")
    p3 = e.c2f(x14, c(256), n(3), False, "model.15")
    x17 = e.concat([e.conv(p3, c(256), 3, 2, "model.16"), x12], "model.17")
    p4 = e.c2f(x17, c(512), n(3), False, "model.18")
    x20 = e.concat([e.conv(p4, c(512), 3, 2, "model.19"), x9], "model.20")
    p5 = e.c2f(x20, c(1024), n(3), False, "model.21")
    return [p3, p4, p5]


def box_conv_name(i: int) -> str:
    return f"model.22.cv2.{i}.2"


def cls_conv_name(i: int) -> str:
    return f"model.22.cv3.{i}.2"


def detect_branches(e: Emitter, feats: list[str], nc: int = NUM_CLASSES) -> list[tuple[str, str]]:
    """Detect's per-level convs; returns (DFL logits [1,64,H,W], class logits [1,nc,H,W]) per level."""
    c2 = max(16, e.chans[feats[0]] // 4, REG_MAX * 4)
    c3 = max(e.chans[feats[0]], min(nc, 100))
    out = []
    for i, f in enumerate(feats):
        b = e.conv(e.conv(f, c2, 3, 1, f"model.22.cv2.{i}.0"), c2, 3, 1, f"model.22.cv2.{i}.1")
        b = e.conv(b, 4 * REG_MAX, 1, 1, box_conv_name(i), act=False)
        k = e.conv(e.conv(f, c3, 3, 1, f"model.22.cv3.{i}.0"), c3, 3, 1, f"model.22.cv3.{i}.1")
        k = e.conv(k, nc, 1, 1, cls_conv_name(i), act=False)
        out.append((b, k))
    return out


def anchors(size: int = INPUT_SIZE) -> tuple[np.ndarray, np.ndarray]:
    """Anchor centres in grid units [2, A] (x row, y row) and strides [A], row-major per stride."""
    points, strides = [], []
    for s in STRIDES:
        h = w = size // s
        gy, gx = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
        points.append(np.stack([gx.ravel(), gy.ravel()]) + 0.5)
        strides.append(np.full(h * w, s))
    return np.concatenate(points, 1).astype(np.float32), np.concatenate(strides).astype(np.float32)


@dataclass(frozen=True)
class BoxNodes:
    """Node names of :func:`dist2bbox`'s steps, after the layout's prefix."""

    x1y1: str
    x2y2: str
    corner_sum: str
    centre: str
    wh: str
    xywh: str


SPLIT_BOX_NODES = BoxNodes("x1y1", "x2y2", "c_sum", "centre", "wh", "xywh")
# ultralytics' own ONNX export names these steps after their ops.
STANDARD_BOX_NODES = BoxNodes("Sub", "Add", "Add_1", "Div", "Sub_1", "Concat_xywh")


def dist2bbox(e: Emitter, p: str, lt: str, rb: str, names: BoxNodes, out: str) -> tuple[str, int]:
    """ultralytics' dist2bbox: anchor-to-side distances → ``out``, (cx, cy, w, h) in pixels; and the
    anchor count."""
    points, strides = anchors(e.size)
    pts = e.const(f"{p}anchors", points[None])
    x1y1 = e.node("Sub", [pts, lt], f"{p}{names.x1y1}")[0]
    x2y2 = e.node("Add", [pts, rb], f"{p}{names.x2y2}")[0]
    half = e.const(f"{p}half", np.array(0.5, dtype=np.float32))
    centre = e.node(
        "Mul", [e.node("Add", [x1y1, x2y2], f"{p}{names.corner_sum}")[0], half], f"{p}{names.centre}"
    )[0]
    wh = e.node("Sub", [x2y2, x1y1], f"{p}{names.wh}")[0]
    xywh = e.node("Concat", [centre, wh], f"{p}{names.xywh}", axis=1)[0]
    boxes = e.node("Mul", [xywh, e.const(f"{p}strides", strides[None, None])], out)[0]
    return boxes, int(points.shape[1])


def emit_split_outputs(e: Emitter, heads: list[tuple[str, str]], nc: int | None = None) -> None:
    """DFL decode inside the graph → boxes [1,4,A] (cx, cy, w, h pixels) and scores [1,nc,A]."""
    nc = nc or e.nc
    p = DECODE_PREFIX
    flat_b = [
        e.node("Reshape", [b, e.const(f"{p}shape_b{i}", np.array([1, 4 * REG_MAX, -1]))], f"{p}flat_b{i}")[0]
        for i, (b, _) in enumerate(heads)
    ]
    flat_k = [
        e.node("Reshape", [k, e.const(f"{p}shape_k{i}", np.array([1, nc, -1]))], f"{p}flat_k{i}")[0]
        for i, (_, k) in enumerate(heads)
    ]
    box = e.node("Concat", flat_b, f"{p}box_cat", axis=2)[0]
    box = e.node("Reshape", [box, e.const(f"{p}shape_dfl", np.array([1, 4, REG_MAX, -1]))], f"{p}dfl_bins")[0]
    box = e.node("Transpose", [box], f"{p}dfl_t", perm=[0, 2, 1, 3])[0]  # [1,16,4,A]
    box = e.node("Softmax", [box], f"{p}dfl_softmax", axis=1)[0]
    bins = np.arange(REG_MAX, dtype=np.float32).reshape(1, REG_MAX, 1, 1)
    dist = e.node("Conv", [box, e.const(f"{p}dfl.weight", bins)], f"{p}dfl_conv")[0]  # expected bin
    dist = e.node("Reshape", [dist, e.const(f"{p}shape_dist", np.array([1, 4, -1]))], f"{p}dist")[0]

    def sl(start: int, end: int, tag: str) -> str:
        args = [e.const(f"{p}{tag}_{v}", np.array([v])) for v in (start, end)]
        return e.node("Slice", [dist, *args, e.const(f"{p}{tag}_axis", np.array([1]))], f"{p}{tag}")[0]

    lt, rb = sl(0, 2, "lt"), sl(2, 4, "rb")
    _, total = dist2bbox(e, p, lt, rb, SPLIT_BOX_NODES, "boxes")
    logits = e.node("Concat", flat_k, f"{p}cls_cat", axis=2)[0]
    e.node("Sigmoid", [logits], "scores")
    e.output("boxes", [1, 4, total])
    e.output("scores", [1, nc, total])


def emit_zoo_outputs(e: Emitter, heads: list[tuple[str, str]], nc: int | None = None) -> None:
    """Per stride: DFL logits, class probabilities, clipped probability sum (rknn_model_zoo order)."""
    nc = nc or e.nc
    lo, hi = (e.const(f"zoo.clip_{v}", np.array(v, dtype=np.float32)) for v in (0, 1))
    sum_axes = e.const("zoo.sum_axes", np.array([1]))
    for (b, k), s in zip(heads, STRIDES, strict=True):
        hw = e.size // s
        box = e.node("Identity", [b], f"dfl_s{s}")[0]
        prob = e.node("Sigmoid", [k], f"cls_s{s}")[0]
        total = e.node("ReduceSum", [prob, sum_axes], f"zoo.sum_raw_s{s}", keepdims=1)[0]
        e.node("Clip", [total, lo, hi], f"sum_s{s}")
        e.output(box, [1, 4 * REG_MAX, hw, hw])
        e.output(prob, [1, nc, hw, hw])
        e.output(f"sum_s{s}", [1, 1, hw, hw])


def emit_standard_outputs(e: Emitter, heads: list[tuple[str, str]]) -> None:
    """ultralytics' Detect head as its ONNX export has it: one output [1, 4+nc, A]."""
    nc, p = e.nc, "model.22/"
    cat = [e.node("Concat", [b, k], f"{p}Concat_{i}", axis=1)[0] for i, (b, k) in enumerate(heads)]
    flat = [
        e.node(
            "Reshape", [x, e.const(f"{p}shape_{i}", np.array([1, 4 * REG_MAX + nc, -1]))], f"{p}Reshape_{i}"
        )[0]
        for i, x in enumerate(cat)
    ]
    x_cat = e.node("Concat", flat, f"{p}Concat_cat", axis=2)[0]
    sizes = e.const(f"{p}split_sizes", np.array([4 * REG_MAX, nc]))
    box, cls = e.node("Split", [x_cat, sizes], f"{p}Split", n_out=2, axis=1)
    box = e.node(
        "Reshape", [box, e.const(f"{p}dfl/shape", np.array([1, 4, REG_MAX, -1]))], f"{p}dfl/Reshape"
    )[0]
    box = e.node("Transpose", [box], f"{p}dfl/Transpose", perm=[0, 2, 1, 3])[0]
    box = e.node("Softmax", [box], f"{p}dfl/Softmax", axis=1)[0]
    bins = np.arange(REG_MAX, dtype=np.float32).reshape(1, REG_MAX, 1, 1)
    dist = e.node("Conv", [box, e.const(f"{p}dfl/conv.weight", bins)], f"{p}dfl/conv/Conv")[0]
    dist = e.node("Reshape", [dist, e.const(f"{p}dfl/shape_out", np.array([1, 4, -1]))], f"{p}dfl/Reshape_1")[
        0
    ]
    lt, rb = e.node(
        "Split", [dist, e.const(f"{p}ltrb_sizes", np.array([2, 2]))], f"{p}Split_1", n_out=2, axis=1
    )
    dbox, total = dist2bbox(e, p, lt, rb, STANDARD_BOX_NODES, f"{p}Mul")
    prob = e.node("Sigmoid", [cls], f"{p}Sigmoid")[0]
    e.node("Concat", [dbox, prob], STANDARD_OUTPUT, axis=1)
    e.output(STANDARD_OUTPUT, [1, 4 + nc, total])


OUTPUT_LAYOUTS: dict[str, Callable[[Emitter, list[tuple[str, str]]], None]] = {
    "split": emit_split_outputs,
    "zoo": emit_zoo_outputs,
    "standard": emit_standard_outputs,
}


def make_model(e: Emitter, batch: int | None, doc: str = "") -> onnx.ModelProto:
    inp = helper.make_tensor_value_info(INPUT_NAME, TensorProto.FLOAT, [batch, 3, e.size, e.size])
    graph = helper.make_graph(e.nodes, "yolov8n", [inp], e.outputs, e.inits)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="npudure", doc_string=doc
    )
    model.ir_version = 8  # readable by older runtimes and rknn-toolkit2's onnx
    return model


def emit(e: Emitter, outputs: Callable[[Emitter, list[tuple[str, str]]], None] | None) -> None:
    """Emit the whole network into ``e``; ``outputs`` adds the output layout (None in calib mode)."""
    e.chans[INPUT_NAME] = 3
    heads = detect_branches(e, backbone_and_neck(e, INPUT_NAME), e.nc)
    if outputs is not None:
        outputs(e, heads)
