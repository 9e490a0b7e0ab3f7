"""Frigate's labelmap for a model: the file Frigate's ``model: labelmap_path:`` names, so the
``class_id`` in a zmq reply reads as the model's own class name.

Frigate reads one ``<id>  <name>`` line per class (or bare names in id order). The names come from
where the agent takes them: a ``.rknn``'s record beside it (``.rknn.json``, written by
``npudure model convert``), an ONNX file's ``names`` metadata (what ``yolo export`` writes), or, with
no model, npudure's own YOLOv8n: COCO-80, the same ids as Frigate's ``/labelmap/coco-80.txt``.
"""

from __future__ import annotations

from pathlib import Path

from npudure.backends.base import BackendError
from npudure.backends.rknn import model_record
from npudure.config import AgentConfig
from npudure.vision.labels import COCO80, NamesError, labelmap_text, parse_names


class LabelmapError(Exception):
    """A model whose class names cannot be told, in the user's words."""


def names_of(model: Path | None) -> tuple[str, ...]:
    """The model's class names by id (COCO-80 without a model)."""
    if model is None:
        return COCO80
    if not model.is_file():
        raise LabelmapError(f"{model}: no such file (give the .rknn or .onnx the boards serve)")
    if model.suffix == ".rknn":
        try:
            config = AgentConfig(node_name="labelmap", backend="rknn", model=str(model))
            return model_record(model, config)[1]
        except BackendError as exc:
            raise LabelmapError(str(exc)) from None
    if model.suffix == ".onnx":
        return _onnx_names(model)
    raise LabelmapError(f"{model}: not a .rknn or .onnx file")


def _onnx_names(model: Path) -> tuple[str, ...]:
    try:
        import onnx
    except ImportError:
        raise LabelmapError("an ONNX file needs the onnx package: pip install 'npudure[onnx]'") from None
    try:
        meta = {p.key: p.value for p in onnx.load(str(model), load_external_data=False).metadata_props}
    except Exception as exc:  # onnx raises DecodeError and others for a file that is not a model
        raise LabelmapError(f"{model}: not a readable ONNX model ({type(exc).__name__})") from None
    if "names" not in meta:
        raise LabelmapError(
            f"{model}: the model names no classes (no `names` metadata; `yolo export` writes it); for "
            "npudure's own COCO model run `npudure model labelmap` without a model"
        )
    try:
        return parse_names(meta["names"])
    except NamesError as exc:
        raise LabelmapError(f"{model}: {exc}") from None


def render(names: tuple[str, ...]) -> str:
    """The labelmap text, as Frigate's own files write it (``<id>  <name>``): the same text the
    scheduler's /v1/vision/labelmap route serves."""
    return labelmap_text(names)
