"""A standard ultralytics YOLOv8 export → the NPU-friendly split ("zoo") layout, on the ONNX graph.

``yolo export format=onnx`` ends the Detect head in one output ``(1, 4+nc, N)``: per level the box
DFL logits [1,64,H,W] and class logits [1,nc,H,W] are concatenated, flattened, concatenated over
levels, split again, DFL-decoded into pixel boxes and joined with the sigmoid class scores. INT8
quantization of that one tensor gives pixel coordinates (0..640) and probabilities (0..1) one scale,
which crushes the scores. So, like rknn_model_zoo's exporter fork but on the graph itself (no torch):
cut the head before the per-level concat and expose, per stride, what the zoo layout has —

* ``dfl_s{stride}``  [1, 64, H, W]  box distribution (DFL logits, decoded on the CPU),
* ``cls_s{stride}``  [1, nc, H, W]  class probabilities (the sigmoid moved up to each level),

then drop the decode tail. The zoo's third output per stride, the clipped class sum (a pre-filter
for its C demo), is left out: issue #44 saw INT8 spoil it on a trained 2-class export (cosine
0.87-0.90, failing the check) while every detection agreed, and npudure takes the best class score on
the CPU from ``cls_s*`` anyway (benchmarks/score_sum.py; docs/adr/0019-score-sum-on-the-cpu.md).

The walk from the output back to the per-level Concats checks each node; a graph that is not a
YOLOv8 head gets :class:`RewriteError` naming the node expected and the one found.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx
from onnx import helper

REG_MAX = 16


class RewriteError(ValueError):
    """The graph is not a YOLOv8 detection head this rewrite understands."""


@dataclass(frozen=True)
class StandardHead:
    """What a standard export's head holds, found by :func:`find_head`."""

    input_name: str
    input_size: int
    num_classes: int
    anchors: int
    levels: list[tuple[str, str, int]]  # (box logits tensor, class logits tensor, stride) per level


def _dims(value: onnx.ValueInfoProto) -> list[int | str]:
    return [
        d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
        for d in value.type.tensor_type.shape.dim
    ]


def _found(tensor: str, producers: dict[str, onnx.NodeProto], inits: set[str]) -> str:
    node = producers.get(tensor)
    if node is not None:
        return f"{node.op_type} node {node.name or '(unnamed)'!r}"
    return "an initializer" if tensor in inits else "a graph input"


def _attr(node: onnx.NodeProto, name: str, default: int | None = None) -> int | None:
    for a in node.attribute:
        if a.name == name:
            return int(helper.get_attribute_value(a))
    return default


def find_head(model: onnx.ModelProto) -> StandardHead:
    """Walk back from the single output to the per-level box/class tensors; RewriteError if anything
    on the way is not what ultralytics' Detect export makes."""
    g = model.graph
    inits = {t.name for t in g.initializer}
    producers = {out: n for n in g.node for out in n.output}
    inputs = [v for v in g.input if v.name not in inits]
    if len(inputs) != 1:
        raise RewriteError(f"expected one image input [1,3,S,S], found {len(inputs)} inputs")
    shape = _dims(inputs[0])
    if len(shape) != 4 or shape[1] != 3 or not isinstance(shape[2], int) or shape[2] != shape[3]:
        raise RewriteError(
            f"expected the image input {inputs[0].name!r} as [1,3,S,S] with a fixed side, found "
            f"[{','.join(map(str, shape))}]: export with a fixed square imgsz "
            "(yolo export format=onnx imgsz=640)"
        )
    size = int(shape[2])
    if len(g.output) != 1:
        raise RewriteError(f"expected one output (1, 4+nc, N), found {len(g.output)} outputs")
    out = g.output[0].name

    def expect(tensor: str, op: str, what: str, **attrs: int) -> onnx.NodeProto:
        node = producers.get(tensor)
        ok = node is not None and node.op_type == op
        if ok:
            assert node is not None
            ok = all(_attr(node, k, 0 if k == "axis" else None) == v for k, v in attrs.items())
        if not ok:
            want = f"{op}" + "".join(f" {k}={v}" for k, v in attrs.items())
            raise RewriteError(
                f"not a YOLOv8 detection head: expected {what} ({want}) producing {tensor!r}, found "
                f"{_found(tensor, producers, inits)}"
                + (
                    f" with {', '.join(f'{a.name}={helper.get_attribute_value(a)}' for a in node.attribute)}"
                    if node is not None and node.attribute and node.op_type == op
                    else ""
                )
            )
        assert node is not None
        return node

    final = expect(out, "Concat", "the box/class Concat", axis=1)
    if len(final.input) != 2:
        raise RewriteError(
            f"not a YOLOv8 detection head: expected the box/class Concat {final.name!r} to join 2 tensors "
            f"(boxes, scores), found {len(final.input)}"
        )
    sigmoid = expect(final.input[1], "Sigmoid", "the class scores' Sigmoid")
    split = producers.get(sigmoid.input[0])
    if split is None or split.op_type not in ("Split", "Slice"):
        raise RewriteError(
            f"not a YOLOv8 detection head: expected the box/class Split producing {sigmoid.input[0]!r}, "
            f"found {_found(sigmoid.input[0], producers, inits)}"
        )
    levels_cat = expect(split.input[0], "Concat", "the Concat over detection levels", axis=2)
    inferred = onnx.shape_inference.infer_shapes(model)
    shapes = {
        v.name: _dims(v) for v in [*inferred.graph.value_info, *inferred.graph.output, *inferred.graph.input]
    }
    levels: list[tuple[str, str, int]] = []
    nc = None
    for flat in levels_cat.input:
        reshape = expect(flat, "Reshape", "a level's Reshape to [1, 64+nc, H*W]")
        cat = expect(reshape.input[0], "Concat", "a level's box/class Concat", axis=1)
        if len(cat.input) != 2:
            raise RewriteError(
                f"not a YOLOv8 detection head: expected the level Concat {cat.name!r} to join box and class "
                f"maps, found {len(cat.input)} inputs"
            )
        box, cls = cat.input
        bs, cs = shapes.get(box, []), shapes.get(cls, [])
        if len(bs) != 4 or bs[1] != 4 * REG_MAX or not isinstance(bs[2], int) or bs[2] != bs[3]:
            raise RewriteError(
                f"not a YOLOv8 detection head: expected {box!r} (first input of {cat.name!r}) to be the DFL "
                f"box logits [1,{4 * REG_MAX},H,H], found [{','.join(map(str, bs))}]"
            )
        if len(cs) != 4 or not isinstance(cs[1], int) or cs[1] < 1 or cs[2:] != bs[2:]:
            raise RewriteError(
                f"not a YOLOv8 detection head: expected {cls!r} (second input of {cat.name!r}) to be class "
                f"logits [1,nc,{bs[2]},{bs[3]}], found [{','.join(map(str, cs))}]"
            )
        if nc is not None and cs[1] != nc:
            raise RewriteError(
                f"not a YOLOv8 detection head: levels disagree on the class count ({nc}, {cs[1]})"
            )
        nc = int(cs[1])
        hw = int(bs[2])
        if size % hw:
            raise RewriteError(f"level {len(levels)} is {hw}x{hw}, which does not divide the {size}-px input")
        levels.append((box, cls, size // hw))
    assert nc is not None
    anchors = sum((size // s) ** 2 for _, _, s in levels)
    out_shape = _dims(g.output[0])
    if out_shape and out_shape[1:] != [4 + nc, anchors] and all(isinstance(d, int) for d in out_shape[1:]):
        raise RewriteError(
            f"not a YOLOv8 detection head: output {out!r} is [{','.join(map(str, out_shape))}] but "
            f"the levels give [1,{4 + nc},{anchors}]"
        )
    return StandardHead(inputs[0].name, size, nc, anchors, levels)


def to_zoo_layout(model: onnx.ModelProto) -> tuple[onnx.ModelProto, StandardHead]:
    """A copy of ``model`` with the zoo split outputs instead of the single output (see module doc)."""
    head = find_head(model)
    result = onnx.ModelProto()
    result.CopyFrom(model)
    g = result.graph
    nodes: list[onnx.NodeProto] = []
    outputs: list[onnx.ValueInfoProto] = []
    f32 = onnx.TensorProto.FLOAT
    for box, cls, s in head.levels:
        hw = head.input_size // s
        nodes.append(helper.make_node("Identity", [box], [f"dfl_s{s}"], name=f"npudure/zoo/dfl_s{s}"))
        nodes.append(helper.make_node("Sigmoid", [cls], [f"cls_s{s}"], name=f"npudure/zoo/cls_s{s}"))
        outputs += [
            helper.make_tensor_value_info(f"dfl_s{s}", f32, [1, 4 * REG_MAX, hw, hw]),
            helper.make_tensor_value_info(f"cls_s{s}", f32, [1, head.num_classes, hw, hw]),
        ]
    all_nodes = [*g.node, *nodes]
    # Keep only what the new outputs need: the old decode tail goes.
    producers = {out: i for i, n in enumerate(all_nodes) for out in n.output}
    needed: set[str] = set()
    keep: set[int] = set()
    stack = [o.name for o in outputs]
    while stack:
        t = stack.pop()
        if t in needed:
            continue
        needed.add(t)
        i = producers.get(t)
        if i is not None and i not in keep:
            keep.add(i)
            stack.extend(x for x in all_nodes[i].input if x)
    kept = [n for i, n in enumerate(all_nodes) if i in keep]
    inits = [t for t in g.initializer if t.name in needed]
    del g.node[:]
    g.node.extend(kept)
    del g.initializer[:]
    g.initializer.extend(inits)
    del g.output[:]
    g.output.extend(outputs)
    alive = {o for n in kept for o in n.output}
    value_info = [v for v in g.value_info if v.name in alive]
    del g.value_info[:]
    g.value_info.extend(value_info)
    props = {p.key: p.value for p in result.metadata_props}
    props["npudure.rewritten"] = (
        "ultralytics single output -> zoo split layout "
        "(per stride: DFL logits, class probabilities; no score sum)"
    )
    del result.metadata_props[:]
    helper.set_model_props(result, props)
    onnx.checker.check_model(result)
    return result, head


__all__ = ["RewriteError", "StandardHead", "find_head", "to_zoo_layout"]
