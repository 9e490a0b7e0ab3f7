"""Class names: what a model calls its classes, read from where each kind of model keeps them.

* A standard ultralytics export carries them in its ONNX metadata, key ``names``, as the Python dict
  ``{0: 'person', 1: 'bicycle', ...}`` (read with ``ast.literal_eval``, never ``eval``); a JSON list
  or dict is accepted too.
* An ``.rknn`` file has no metadata: ``npudure model convert`` writes them into the ``.rknn.json``
  beside it (``names``).
* npudure's own untrained YOLOv8n names none and is COCO-shaped: 80 classes get the COCO names.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Sequence

# COCO-80 in ultralytics' order (coco.yaml): what a stock YOLOv8 and npudure's own model's ids mean.
COCO80: tuple[str, ...] = (
    "person", "bicycle", "car", "motorcycle", "airplane", "bus", "train", "truck", "boat",
    "traffic light", "fire hydrant", "stop sign", "parking meter", "bench", "bird", "cat", "dog",
    "horse", "sheep", "cow", "elephant", "bear", "zebra", "giraffe", "backpack", "umbrella", "handbag",
    "tie", "suitcase", "frisbee", "skis", "snowboard", "sports ball", "kite", "baseball bat",
    "baseball glove", "skateboard", "surfboard", "tennis racket", "bottle", "wine glass", "cup", "fork",
    "knife", "spoon", "bowl", "banana", "apple", "sandwich", "orange", "broccoli", "carrot", "hot dog",
    "pizza", "donut", "cake", "chair", "couch", "potted plant", "bed", "dining table", "toilet", "tv",
    "laptop", "mouse", "remote", "keyboard", "cell phone", "microwave", "oven", "toaster", "sink",
    "refrigerator", "book", "clock", "vase", "scissors", "teddy bear", "hair drier", "toothbrush",
)  # fmt: skip
MAX_NAME_CHARS = 200


def coco_label(class_id: int) -> str:
    """The COCO name of ``class_id`` (DeepStack's and Frigate's labelmap); other ids read ``class<id>``."""
    return COCO80[class_id] if 0 <= class_id < len(COCO80) else f"class{class_id}"


class NamesError(ValueError):
    """Class names that cannot be read, or that do not fit the model's class count."""


def parse_names(text: str) -> tuple[str, ...]:
    """``names`` metadata → names in class-id order (ids must be 0..n-1, each once)."""
    try:
        value = json.loads(text)
    except ValueError:
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            raise NamesError(f"class names {text[:60]!r}... are neither a Python dict nor JSON") from None
    if isinstance(value, dict):
        try:
            ids = sorted(int(k) for k in value)
        except (TypeError, ValueError):
            raise NamesError("class names: the keys must be class ids 0, 1, 2, ...") from None
        if ids != list(range(len(ids))):
            raise NamesError(f"class names: ids must run 0..{len(ids) - 1} without gaps, got {ids[:10]}")
        items = [value[k] if k in value else value[str(k)] for k in ids]
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        raise NamesError(f"class names must be a dict or a list, not {type(value).__name__}")
    return check_names(items)


def check_names(items: Sequence[object]) -> tuple[str, ...]:
    if not items:
        raise NamesError("class names: the list is empty")
    names = tuple(str(n) for n in items)
    if any(len(n) > MAX_NAME_CHARS for n in names):
        raise NamesError(f"class names: a name is longer than {MAX_NAME_CHARS} characters")
    return names


def resolve_names(num_classes: int, names: Sequence[str] | None, source: str) -> tuple[str, ...]:
    """The names to answer with for a model of ``num_classes`` classes: ``names`` when given (their
    count must match), else COCO-80 for an 80-class model, else empty labels."""
    if names:
        if len(names) != num_classes:
            raise NamesError(
                f"{source} names {len(names)} classes but the model has {num_classes}: fix the names or "
                "the model"
            )
        return tuple(names)
    return COCO80 if num_classes == len(COCO80) else ("",) * num_classes


def label(names: Sequence[str], class_id: int) -> str:
    return names[class_id] if 0 <= class_id < len(names) else ""


def labelmap_text(names: Sequence[str]) -> str:
    """Frigate's labelmap file for these names (its ``labelmap_path``), as its own files write it:
    ``<id>  <name>`` per line; an unnamed id reads ``class<id>``."""
    return "".join(f"{i}  {name or f'class{i}'}\n" for i, name in enumerate(names))


def ultralytics_names(names: Sequence[str]) -> str:
    """``names`` as ultralytics writes it into ONNX metadata (``str`` of a dict)."""
    return str(dict(enumerate(names)))


__all__ = [
    "COCO80",
    "NamesError",
    "check_names",
    "label",
    "parse_names",
    "resolve_names",
    "ultralytics_names",
]
