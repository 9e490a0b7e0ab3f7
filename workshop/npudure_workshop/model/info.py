"""What an ONNX model file holds: inputs, outputs, parameters, FLOPs, hash, npudure metadata.

Conventions: parameters = elements of every Conv weight and bias (through DequantizeLinear in INT8
QDQ models); FLOPs = 2 × multiply-accumulates of every Conv at batch 1 (ultralytics' convention,
which is how it quotes 8.7 GFLOPs for YOLOv8n; element-wise ops are not counted).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import onnx

from npudure.backends.base import sha256_file


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int | str, ...]
    dtype: str

    def __str__(self) -> str:
        return f"{self.name} [{','.join(str(d) for d in self.shape)}] {self.dtype}"


@dataclass(frozen=True)
class ModelInfo:
    path: Path
    sha256: str
    size_bytes: int
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    params: int
    flops: int
    quantized: bool
    metadata: dict[str, str] = field(default_factory=dict)

    @property
    def gflops(self) -> float:
        return self.flops / 1e9


def _tensor_infos(values: list[onnx.ValueInfoProto]) -> list[TensorInfo]:
    result = []
    for v in values:
        t = v.type.tensor_type
        dims = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in t.shape.dim)
        result.append(TensorInfo(v.name, dims, onnx.TensorProto.DataType.Name(t.elem_type).lower()))
    return result


def _conv_weights(model: onnx.ModelProto) -> list[tuple[onnx.NodeProto, list[onnx.TensorProto]]]:
    """Each Conv with its weight (and bias) initializers, looking through DequantizeLinear."""
    inits = {t.name: t for t in model.graph.initializer}
    dequant = {n.output[0]: n.input[0] for n in model.graph.node if n.op_type == "DequantizeLinear"}
    result = []
    for node in model.graph.node:
        if node.op_type != "Conv":
            continue
        tensors = []
        for name in node.input[1:3]:
            name = dequant.get(name, name)
            if name in inits:
                tensors.append(inits[name])
        result.append((node, tensors))
    return result


def count_params(model: onnx.ModelProto) -> int:
    total = 0
    for _, tensors in _conv_weights(model):
        for t in tensors:
            n = 1
            for d in t.dims:
                n *= d
            total += n
    return total


def count_flops(model: onnx.ModelProto) -> int:
    """2 × Conv multiply-accumulates at batch 1, from the inferred output shapes."""
    inferred = onnx.shape_inference.infer_shapes(model)
    shapes = {}
    for v in [*inferred.graph.value_info, *inferred.graph.output]:
        dims = v.type.tensor_type.shape.dim
        shapes[v.name] = [d.dim_value if d.HasField("dim_value") else 0 for d in dims]
    macs = 0
    for node, tensors in _conv_weights(inferred):
        out = shapes.get(node.output[0])
        if not tensors or not out or len(out) != 4 or 0 in out[1:]:
            continue
        _, cin_per_group, kh, kw = tensors[0].dims
        macs += out[1] * out[2] * out[3] * cin_per_group * kh * kw
    return 2 * macs


def inspect(path: str | Path) -> ModelInfo:
    """Read ``path``; raises ValueError with the file name if it is not a readable ONNX model."""
    path = Path(path)
    try:
        model = onnx.load(str(path))
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file") from None
    except Exception as exc:
        raise ValueError(
            f"{path}: not a readable ONNX model ({type(exc).__name__}); rebuild it with "
            "`npudure model build --force`"
        ) from None
    init_names = {t.name for t in model.graph.initializer}
    inputs = [v for v in model.graph.input if v.name not in init_names]
    quantized = any(n.op_type in ("QuantizeLinear", "QLinearConv", "ConvInteger") for n in model.graph.node)
    return ModelInfo(
        path=path,
        sha256=sha256_file(path),
        size_bytes=path.stat().st_size,
        inputs=_tensor_infos(inputs),
        outputs=_tensor_infos(list(model.graph.output)),
        params=count_params(model),
        flops=count_flops(model),
        quantized=quantized,
        metadata={p.key: p.value for p in model.metadata_props},
    )


__all__ = ["ModelInfo", "TensorInfo", "count_flops", "count_params", "inspect"]
