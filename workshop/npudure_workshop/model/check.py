"""``npudure model check``: will the boards serve this model file? Read on the controller, before
anything is deployed (the agent role's preflight runs it for every .onnx and .rknn a board is to hold),
with the same rules the agent applies when it loads the model (npudure/vision/model_io.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from npudure.backends.base import BackendError
from npudure.backends.rknn import model_record
from npudure.config import AgentConfig
from npudure.vision.labels import NamesError, parse_names, resolve_names
from npudure.vision.model_io import ModelIOError, read_model_io


class ModelCheckError(ValueError):
    """The boards would not serve this file; the message says why and what to do."""


@dataclass(frozen=True)
class Checked:
    path: Path
    size: int
    classes: int
    names: tuple[str, ...]
    layout: str

    def as_dict(self) -> dict[str, object]:
        """What the agent role writes into a sim board's config for this model (`--json`)."""
        return {
            "path": str(self.path),
            "input_size": self.size,
            "classes": self.classes,
            "names": list(self.names),
        }

    def line(self) -> str:
        shown = ", ".join(self.names[:5]) + (", ..." if len(self.names) > 5 else "")
        return (
            f"{self.path}: YOLOv8 ({self.layout} outputs), {self.size}x{self.size} input, "
            f"{self.classes} classes ({shown})"
        )


def check_model(path: Path, input_size: int | None = None) -> Checked:
    """What the boards would serve from ``path`` (an .onnx, or an .rknn with its converter record), or
    ModelCheckError naming the problem and the fix. ``input_size`` is the side the boards' config sets."""
    if not path.is_file():
        raise ModelCheckError(f"{path}: no such file; copy the model there or correct its path")
    if path.suffix == ".rknn":
        return _check_rknn(path, input_size)
    if path.suffix != ".onnx":
        raise ModelCheckError(f"{path}: not an .onnx or .rknn file; the boards load one of these")
    try:
        import onnx
    except ImportError:
        raise ModelCheckError(
            "checking an ONNX file needs the onnx package: pip install 'npudure[onnx]'"
        ) from None
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # onnx raises DecodeError and others for a file that is not a model
        raise ModelCheckError(
            f"{path}: not a readable ONNX model ({type(exc).__name__}); export it again "
            "(yolo export format=onnx) or point at the right file"
        ) from None
    graph = model.graph
    weights = {t.name for t in graph.initializer}
    inputs = [(v.name, _dims(v)) for v in graph.input if v.name not in weights]
    try:
        io = read_model_io(path, inputs, [_dims(v) for v in graph.output], input_size)
        meta = {p.key: p.value for p in model.metadata_props}
        names = parse_names(meta["names"]) if meta.get("names") else None
        resolved = resolve_names(io.classes, names, str(path))
    except (ModelIOError, NamesError) as exc:
        raise ModelCheckError(str(exc)) from None
    return Checked(path, io.size, io.classes, resolved, io.layout)


def _dims(value: object) -> list[int | str | None]:
    dims = value.type.tensor_type.shape.dim  # type: ignore[attr-defined]
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in dims]


def _check_rknn(path: Path, input_size: int | None) -> Checked:
    """An .rknn holds no shapes RKNNLite reads off the board: its converter record says them."""
    try:
        size, names = model_record(path, AgentConfig(node_name="check", backend="rknn", model=str(path)))
    except BackendError as exc:
        raise ModelCheckError(str(exc)) from None
    if input_size is not None and input_size != size:
        raise ModelCheckError(
            f"model file {path} takes {size}x{size} frames (its record {path.name}.json) but the agent "
            f"config says input_size {input_size}: remove input_size from the config or fix it"
        )
    return Checked(path, size, len(names), names, "zoo")
