"""Build the YOLOv8n ONNX file, and keep built files in a cache keyed by layout, INT8 and seed."""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import helper

from npudure.backends.base import sha256_file
from npudure.vision.frames import INPUT_SIZE
from npudure.vision.labels import COCO80, ultralytics_names
from npudure_workshop.model.calibrate import calibrate, calibration_frames
from npudure_workshop.model.info import count_flops, count_params
from npudure_workshop.model.yolov8n import (
    LAYOUTS,
    NUM_CLASSES,
    OUTPUT_LAYOUTS,
    REG_MAX,
    STRIDES,
    Emitter,
    Layout,
    box_conv_name,
    cls_conv_name,
    emit,
    make_model,
)

# Bump whenever the graph or the weights change: cached files from another builder are rebuilt.
BUILDER_VERSION = "1"
CACHE_ENV = "NPUDURE_CACHE"
NOTE = (
    "YOLOv8n architecture with UNTRAINED weights (seeded He init, BatchNorm statistics estimated on "
    "synthetic frames): real compute and real output shapes, detections without meaning"
)


class ModelBuildError(Exception):
    """The model cannot be built as asked; the message says why and what to do instead."""


@dataclass(frozen=True)
class BuildResult:
    path: Path
    sha256: str
    params: int  # Conv weights + biases in the file (BatchNorm folded)
    params_unfused: int  # the same network before folding: + BatchNorm γ and β, − the folded biases
    flops: int  # 2 × Conv multiply-accumulates at 640×640, batch 1
    seconds: float
    cached: bool
    layout: Layout
    int8: bool
    seed: int
    nc: int = NUM_CLASSES
    size: int = INPUT_SIZE

    @property
    def gflops(self) -> float:
        return self.flops / 1e9


def cache_dir() -> Path:
    """Where built models are kept: $NPUDURE_CACHE/models, else ~/.cache/npudure/models."""
    root = os.environ.get(CACHE_ENV)
    return (Path(root) if root else Path.home() / ".cache" / "npudure") / "models"


def model_filename(
    layout: Layout = "split", int8: bool = False, seed: int = 0, nc: int = NUM_CLASSES, size: int = INPUT_SIZE
) -> str:
    shape = "" if (nc, size) == (NUM_CLASSES, INPUT_SIZE) else f"-nc{nc}-{size}"
    return f"yolov8n-{layout}{shape}{'-int8' if int8 else ''}-seed{seed}.onnx"


def default_model_path(
    layout: Layout = "split", int8: bool = False, seed: int = 0, nc: int = NUM_CLASSES, size: int = INPUT_SIZE
) -> Path:
    return cache_dir() / model_filename(layout, int8, seed, nc, size)


def default_names(nc: int) -> tuple[str, ...]:
    """COCO's for 80 classes (what the project's model is shaped as), else class0, class1, ..."""
    return COCO80 if nc == len(COCO80) else tuple(f"class{i}" for i in range(nc))


def _check_args(layout: str, int8: bool, seed: int, nc: int = NUM_CLASSES, size: int = INPUT_SIZE) -> None:
    if nc < 1:
        raise ModelBuildError(f"the class count must be 1 or more, got {nc}")
    if size < 64 or size % 32:
        raise ModelBuildError(f"the input size must be a multiple of 32 from 64 up, got {size}")
    if layout not in LAYOUTS:
        raise ModelBuildError(f"unknown layout {layout!r}; use one of: {', '.join(LAYOUTS)}")
    if int8 and layout != "split":
        raise ModelBuildError(
            "--int8 quantizes for ONNX Runtime and needs --layout split; for the NPU build the float "
            "zoo layout and let rknn-toolkit2 quantize it (docs/model.md)"
        )
    if seed < 0:
        raise ModelBuildError(f"seed must be 0 or more, got {seed}")


@dataclass(frozen=True)
class _Settings:
    """What a build is asked for: the metadata it writes, the cache check and the result all read it."""

    layout: Layout
    int8: bool
    seed: int
    nc: int = NUM_CLASSES
    size: int = INPUT_SIZE
    names: tuple[str, ...] | None = None


def _metadata(s: _Settings, params_unfused: int) -> dict[str, str]:
    meta = {
        "npudure.builder_version": BUILDER_VERSION,
        "npudure_workshop.model": "yolov8n",
        "npudure.layout": s.layout,
        "npudure.int8": str(s.int8).lower(),
        "npudure.seed": str(s.seed),
        "npudure.params_unfused": str(params_unfused),
        "npudure.trained": "false",
        "npudure.note": NOTE,
    }
    if s.layout == "standard" or (s.nc, s.size) != (NUM_CLASSES, INPUT_SIZE):
        # The keys ultralytics' exporter writes (what a user's `yolo export format=onnx` file has).
        meta |= {
            "description": "npudure YOLOv8n (untrained), ultralytics export layout",
            "stride": "32",
            "task": "detect",
            "batch": "1",
            "imgsz": f"[{s.size}, {s.size}]",
            "names": ultralytics_names(s.names or default_names(s.nc)),
        }
    return meta


def _unfused_params(weights: dict[str, np.ndarray]) -> int:
    """Parameters of the same network before folding, counted as ultralytics does (3,157,200)."""
    plain = {f(i) for i in range(len(STRIDES)) for f in (box_conv_name, cls_conv_name)}
    # Conv+BN blocks carry γ and β (2 per channel) instead of a bias; Detect's last convs keep a bias.
    total = REG_MAX  # the DFL conv's fixed 0..15 weights, which ultralytics counts as parameters
    for name, w in weights.items():
        total += w.size + (w.shape[0] if name in plain else 2 * w.shape[0])
    return total


def build_yolov8n(
    path: str | Path,
    layout: Layout = "split",
    int8: bool = False,
    seed: int = 0,
    threads: int = 2,
    nc: int = NUM_CLASSES,
    size: int = INPUT_SIZE,
    names: tuple[str, ...] | None = None,
) -> BuildResult:
    """Build the model into ``path`` (always builds; see :func:`ensure_model` for the cache)."""
    _check_args(layout, int8, seed, nc, size)
    settings = _Settings(layout, int8, seed, nc, size, names)
    start = time.perf_counter()
    path = Path(path)
    weights, stats = calibrate(seed, calibration_frames(seed, size=size), threads=threads, nc=nc)
    e = Emitter("final", weights, rng=None, stats=stats, nc=nc, size=size)
    emit(e, OUTPUT_LAYOUTS[layout])
    model = make_model(e, batch=1, doc=NOTE)
    onnx.checker.check_model(model)
    unfused = _unfused_params(weights)
    meta = _metadata(settings, unfused)
    helper.set_model_props(model, meta)

    path.parent.mkdir(parents=True, exist_ok=True)
    # Write next to the target and rename: a reader never sees half a file, and two concurrent
    # builds of the same model both end with a whole one.
    with tempfile.TemporaryDirectory(prefix=".build-", dir=path.parent) as tmp:
        staged = Path(tmp) / path.name
        onnx.save(model, str(staged))
        if int8:
            from npudure_workshop.model.quantize import quantize_int8

            quantized = Path(tmp) / "int8.onnx"
            quantize_int8(staged, quantized, seed)
            qmodel = onnx.load(str(quantized))
            helper.set_model_props(qmodel, meta)
            qmodel.doc_string = NOTE
            onnx.save(qmodel, str(staged))
            model = qmodel
        os.replace(staged, path)
    return _result(path, model, unfused, start, False, settings)


def _result(
    path: Path, model: onnx.ModelProto, unfused: int, start: float, cached: bool, s: _Settings
) -> BuildResult:
    """A fresh build and a cache hit report alike: what the file holds, measured from it."""
    return BuildResult(
        path=path,
        sha256=sha256_file(path),
        params=count_params(model),
        params_unfused=unfused,
        flops=count_flops(model),
        seconds=time.perf_counter() - start,
        cached=cached,
        layout=s.layout,
        int8=s.int8,
        seed=s.seed,
        nc=s.nc,
        size=s.size,
    )


def _cached(path: Path, settings: _Settings) -> BuildResult | None:
    """The BuildResult of an existing, intact file built by this builder with these settings."""
    start = time.perf_counter()
    try:
        model = onnx.load(str(path))
    except Exception:
        return None  # missing, truncated or corrupt: rebuild
    meta = {p.key: p.value for p in model.metadata_props}
    unfused = int(meta.get("npudure.params_unfused", "0") or 0)
    if meta != _metadata(settings, unfused):
        return None  # another builder version or other settings
    return _result(path, model, int(meta["npudure.params_unfused"]), start, True, settings)


def ensure_model(
    layout: Layout = "split",
    int8: bool = False,
    seed: int = 0,
    path: str | Path | None = None,
    force: bool = False,
    threads: int = 2,
    nc: int = NUM_CLASSES,
    size: int = INPUT_SIZE,
    names: tuple[str, ...] | None = None,
) -> BuildResult:
    """Return the model at ``path`` (default: the cache), building it only if it is missing, was
    built by another builder version or with other settings, or ``force`` is set.

    ``nc``, ``size`` and ``names`` shape the model (any class count, any input side that is a multiple
    of 32); the ``standard`` layout is ultralytics' own single-output export, with its metadata."""
    _check_args(layout, int8, seed, nc, size)
    target = Path(path) if path is not None else default_model_path(layout, int8, seed, nc, size)
    if not force and target.is_file():
        hit = _cached(target, _Settings(layout, int8, seed, nc, size, names))
        if hit is not None:
            return hit
    return build_yolov8n(
        target, layout=layout, int8=int8, seed=seed, threads=threads, nc=nc, size=size, names=names
    )
