"""YOLOv8n for npudure: the ONNX graph builder (no download, no torch), its cache and seeded frames.

Imports stay lazy: ``npudure.model.synthetic_frame`` works on a board without the ``onnx`` package, and only
building or inspecting a model needs ``pip install 'npudure[onnx]'``.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_LAZY = {
    "build_yolov8n": "npudure.model.build",
    "ensure_model": "npudure.model.build",
    "default_model_path": "npudure.model.build",
    "cache_dir": "npudure.model.build",
    "BuildResult": "npudure.model.build",
    "ModelBuildError": "npudure.model.build",
    "inspect": "npudure.model.info",
    "synthetic_frame": "npudure.vision.frames",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'npudure.model' has no attribute {name!r}")
