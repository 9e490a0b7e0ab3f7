"""Make the untrained YOLOv8n's output depend on its input, with a steady handful of detections.

He-initialised weights alone give activations that drift from layer to layer and class scores that
are the same for every frame. So every BatchNorm is re-estimated on seeded synthetic frames (as
after pruning), with γ = 1 and β = ``BN_BETA`` = 1: every pre-activation has unit variance around 1
over those frames. With β = 0 the untrained network is chaotic: its class logits had tails of
10-30 σ that swung from frame to frame (no detection on a third of the frames, thousands on others);
β = 1 keeps SiLU in its gentler range and the count steady (about 10-40 per frame).

The Detect head's last convs are normalised the same way, then the class bias is set so that on the
median calibration frame ``TARGET_CANDIDATES`` anchors score ≥ 0.25.
"""

from __future__ import annotations

import math

import numpy as np

from npudure.vision.frames import INPUT_SIZE, synthetic_frame
from npudure_workshop.model.yolov8n import (
    BN_EPS,
    INPUT_NAME,
    NUM_CLASSES,
    STRIDES,
    ConvStats,
    Emitter,
    box_conv_name,
    cls_conv_name,
    emit,
    make_model,
)

CALIBRATION_FRAMES = 8
TARGET_CANDIDATES = 20  # anchors with best class probability ≥ SCORE_THRESHOLD on the median frame
SCORE_THRESHOLD = 0.25
BN_GAMMA, BN_BETA = 1.0, 1.0
CLS_GAIN = 1.5  # spreads the surviving scores over 0.25..~0.9 instead of just above the threshold
BOX_GAIN = 2.0  # peakier DFL distributions → box sizes that vary from anchor to anchor


def calibration_frames(
    seed: int, count: int = CALIBRATION_FRAMES, purpose: int = 1, size: int = INPUT_SIZE
) -> list[np.ndarray]:
    """Frames for model ``seed``: seeds far from the small integers tests and benches use, and
    distinct per ``purpose`` (1 BatchNorm, 2 INT8 ranges)."""
    return [synthetic_frame(purpose * 10**9 + seed * 1000 + i, size) for i in range(count)]


def to_nchw(frames: list[np.ndarray]) -> np.ndarray:
    """HWC uint8 RGB frames → NCHW float32 in 0..1 (the model's input)."""
    batch = np.stack(frames).transpose(0, 3, 1, 2)
    return np.multiply(batch, np.float32(1 / 255), dtype=np.float32)


def _stable(x: np.ndarray) -> np.ndarray:
    # Round to float16 precision so tiny float differences between CPUs rarely change the file's hash.
    return x.astype(np.float16).astype(np.float32)


def calibrate(
    seed: int, frames: list[np.ndarray], threads: int = 2, nc: int = NUM_CLASSES
) -> tuple[dict[str, np.ndarray], dict[str, ConvStats]]:
    """Draw the weights for ``seed`` and estimate every folded-BatchNorm statistic on ``frames``."""
    import onnxruntime as ort

    weights: dict[str, np.ndarray] = {}
    cls_names = [cls_conv_name(i) for i in range(len(STRIDES))]
    rng = np.random.default_rng(seed)
    size = frames[0].shape[0]  # the model's input side is the frames' (square, a multiple of 32)
    e = Emitter(
        "calib", weights, rng, expose=set(cls_names), bn_gamma=BN_GAMMA, bn_beta=BN_BETA, nc=nc, size=size
    )
    emit(e, None)
    model = make_model(e, batch=len(frames))
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    outs = dict(zip(names, session.run(None, {INPUT_NAME: to_nchw(frames)}), strict=True))

    stats: dict[str, ConvStats] = {}
    for name in weights:
        mean = outs[f"{name}.bn.mean"].reshape(-1)
        std = np.sqrt(outs[f"{name}.bn.var"].reshape(-1) + BN_EPS)
        stats[name] = ConvStats(mean=_stable(mean), std=_stable(std), gain=BN_GAMMA, shift=BN_BETA)

    # Class bias from each anchor's best normalised class logit, per frame.
    per_level = [outs[f"{n}.bn.out"] for n in cls_names]
    zn = np.concatenate([z.reshape(z.shape[0], z.shape[1], -1) for z in per_level], axis=2)
    best = zn.max(axis=1)  # [frames, anchors]
    # The median frame gets TARGET_CANDIDATES (a pooled quantile would follow the busiest frame).
    per_frame = np.quantile(best, 1.0 - TARGET_CANDIDATES / best.shape[1], axis=1)
    threshold_logit = math.log(SCORE_THRESHOLD / (1 - SCORE_THRESHOLD))
    bias = round(threshold_logit - CLS_GAIN * float(np.median(per_frame)), 3)
    for i, name in enumerate(cls_names):
        stats[name].gain, stats[name].shift = CLS_GAIN, bias
        stats[box_conv_name(i)].gain, stats[box_conv_name(i)].shift = BOX_GAIN, 0.0
    return weights, stats
