"""YOLOv8n for npudure: the ONNX graph builder (no download, no torch), its cache and seeded frames.

Imports stay lazy: ``model.synthetic_frame`` works on a board without the ``onnx`` package, and only
building or inspecting a model needs ``pip install 'npudure[onnx]'``.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_LAZY = {
    "build_yolov8n": "npudure_workshop.model.build",
    "ensure_model": "npudure_workshop.model.build",
    "default_model_path": "npudure_workshop.model.build",
    "cache_dir": "npudure_workshop.model.build",
    "BuildResult": "npudure_workshop.model.build",
    "ModelBuildError": "npudure_workshop.model.build",
    "inspect": "npudure_workshop.model.info",
    "synthetic_frame": "npudure.vision.frames",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'npudure_workshop.model' has no attribute {name!r}")
