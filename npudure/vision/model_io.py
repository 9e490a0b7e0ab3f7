"""What a YOLOv8 model file must take and give to be served: one [1,3,S,S] image with a fixed side S (a
multiple of 32), and outputs in a layout the post-processing reads. One check for the agent, which reads
the shapes from its ONNX Runtime session, and for `npudure model check`, which reads them from the file
on the controller before anything is deployed (the agent role's preflight)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from npudure.vision.postprocess import Layout, LayoutError, detect_layout, num_classes

# A dimension as the model file states it: a number, or a name / None where it is symbolic.
Dim = int | str | None


class ModelIOError(ValueError):
    """The model cannot be served; the message names what it takes and how to fix it."""


@dataclass(frozen=True)
class ModelIO:
    input_name: str
    size: int
    layout: Layout
    classes: int


def read_model_io(
    path: object,
    inputs: Sequence[tuple[str, Sequence[Dim]]],
    outputs: Sequence[Sequence[Dim]],
    input_size: int | None = None,
    example_size: int = 640,
) -> ModelIO:
    """The served shape of the model at ``path`` from its (name, shape) inputs and its output shapes;
    ``input_size``, when given, is the side the board's config expects."""
    shape = list(inputs[0][1]) if len(inputs) == 1 else []
    size = shape[2] if len(shape) == 4 else None
    if (
        len(inputs) != 1
        or len(shape) != 4
        or shape[1] != 3
        or not isinstance(size, int)
        or shape[3] != size
        or size % 32
    ):
        got = ", ".join(f"{name} {list(dims)}" for name, dims in inputs) or "no input"
        raise ModelIOError(
            f"model file {path} takes {got}, but the agent feeds one [1,3,S,S] image with a fixed side "
            f"S, a multiple of 32 (e.g. {example_size}): export the YOLOv8 model with a fixed square imgsz "
            f"(yolo export format=onnx imgsz={example_size})"
        )
    if input_size is not None and input_size != size:
        raise ModelIOError(
            f"model file {path} takes {size}x{size} frames but the agent config says input_size "
            f"{input_size}: remove input_size from the config or fix it"
        )
    out_shapes = [[d if isinstance(d, int) else 1 for d in dims] for dims in outputs]
    try:
        layout = detect_layout(out_shapes)
    except LayoutError as exc:
        raise ModelIOError(f"model file {path} is not a YOLOv8 detection export: {exc}") from None
    return ModelIO(inputs[0][0], size, layout, num_classes(out_shapes))
