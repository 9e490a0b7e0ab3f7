#!/usr/bin/env python3
"""What the zoo layout's score-sum output is worth on the CPU (issue #44,
docs/adr/0019-score-sum-on-the-cpu.md).

Per frame, on real outputs of ONNX Runtime for two models — the default 80-class zoo model and a
2-class standard export rewritten to the zoo layout — it times, single-threaded on THIS machine:

* ``max``: the best class score per cell from the class probabilities (what npudure's post-processing
  does, npudure/vision/postprocess.py: the score sum is never read);
* ``sum``: the score sum computed on the CPU from the class probabilities (what it would cost to drop
  the branch from the NPU and still have it);
* ``prefilter``: the zoo C demo's way — threshold the NPU's score sum, then the best class score only
  on the cells that pass (what the branch would save, if it could be trusted after INT8);
* ``sum threshold``: the prefilter's floor, the score sum thresholded and nothing else (a trained
  model leaves few cells over the threshold, so its prefilter costs little more than this);
* ``postprocess``: npudure's whole post-processing of the frame, for scale.

Prints figures, asserts nothing. The untrained models put many candidates over the threshold, so
``prefilter`` keeps more cells than a trained model would; ``max`` minus ``sum threshold`` bounds
what the score sum can save a trained model's post-processing per frame.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/score_sum.py          # ~20 s
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from npudure.vision.postprocess import postprocess
from npudure_workshop.bench.fmt import text_table
from npudure_workshop.model import simcheck
from npudure_workshop.model.build import ensure_model
from npudure_workshop.model.convert import check_set, inspect_source, npu_graph

THRESHOLD = 0.25
KEYS = ("max", "sum", "prefilter", "sum threshold", "postprocess")


def zoo_graphs(folder: Path) -> list[tuple[str, Path, int]]:
    """(label, zoo-layout ONNX, input side) for the default model and a 2-class standard export."""
    default = ensure_model(layout="zoo").path
    standard = ensure_model("standard", nc=2, size=640, names=("Normal", "Fall"), path=folder / "fall.onnx")
    rewritten = npu_graph(inspect_source(standard.path), folder / "fall-x.rknn")
    return [("default zoo, 80 classes", default, 640), ("standard export, 2 classes", rewritten, 640)]


def timed(fn: Callable[[], object], seconds: float) -> float:
    """Median seconds per call over ``seconds`` of calls (at least 20)."""
    times = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(times) < 20:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def cases(outs: list[np.ndarray]) -> dict[str, Callable[[], object]]:
    groups = [
        (outs[i][0], outs[i + 1][0].reshape(outs[i + 1].shape[1], -1), outs[i + 2][0].ravel())
        for i in (0, 3, 6)
    ]

    def best() -> None:
        for _, cls, _ in groups:
            np.flatnonzero(cls.max(axis=0) >= THRESHOLD)

    def summed() -> None:
        for _, cls, _ in groups:
            np.minimum(cls.sum(axis=0), 1.0)

    def sum_only() -> None:
        for _, _, score_sum in groups:
            np.flatnonzero(score_sum >= THRESHOLD)

    def prefilter() -> None:
        for _, cls, score_sum in groups:
            cells = np.flatnonzero(score_sum >= THRESHOLD)
            np.flatnonzero(cls[:, cells].max(axis=0) >= THRESHOLD)

    return {
        "max": best,
        "sum": summed,
        "prefilter": prefilter,
        "sum threshold": sum_only,
        "postprocess": lambda: postprocess(outs, score_threshold=THRESHOLD),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=8, help="check photos to time on (default 8)")
    parser.add_argument("--seconds", type=float, default=0.3, help="measured seconds per case and frame")
    args = parser.parse_args()
    print(
        f"per frame, one thread, {platform.processor() or platform.machine()} ({os.cpu_count()} CPUs, "
        f"shared), numpy {np.__version__}; median over {args.frames} photos, score >= {THRESHOLD}"
    )
    rows = []
    with tempfile.TemporaryDirectory(prefix="npudure-score-sum-") as tmp:
        for label, graph, size in zoo_graphs(Path(tmp)):
            frames = check_set(None, args.frames, size)
            per_frame = simcheck.onnx_outputs(graph, frames, threads=1)
            figures: dict[str, list[float]] = {}
            kept = []
            for outs in per_frame:
                for name, fn in cases(outs).items():
                    figures.setdefault(name, []).append(timed(fn, args.seconds))
                kept.append(sum(int((outs[i].ravel() >= THRESHOLD).sum()) for i in (2, 5, 8)))
            rows.append(
                [label]
                + [f"{statistics.median(figures[k]) * 1e6:.1f}" for k in KEYS]
                + [f"{statistics.median(kept):.0f} of 8400"]
            )
    print("\n".join(text_table(["model", *(f"{k} µs" for k in KEYS), "cells over by sum"], rows)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
