"""A YOLOv8 export whose class-score branch INT8 cannot hold: the "deliberately broken model" of the
conversion check (issue #44).

In one level's class branch, one channel of the activation before the last 1x1 conv is lifted by
``OFFSET`` (its conv's bias), and the 1x1 conv's bias takes it back out. SiLU is the identity that far
up, so in float the model still detects (that channel turns linear: a different model, not a broken
ONNX). But that activation tensor now spans ~0..OFFSET, and INT8 gives a tensor one scale (per tensor,
as rknn-toolkit2 quantises activations): every other channel falls into a step or two, and the level's
class scores come out of the NPU as noise. An outlier channel like this is what real trained networks
sometimes carry.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from npudure_workshop.model.rewrite import find_head

OFFSET = 500.0


def corrupt_score_branch(src: Path, dst: Path, stride: int = 16, offset: float = OFFSET) -> Path:
    """Write ``src`` with the class branch of ``stride``'s level corrupted as above to ``dst``."""
    model = onnx.load(str(src))
    producers = {out: n for n in model.graph.node for out in n.output}
    inits = {t.name: t for t in model.graph.initializer}
    cls = next(c for _, c, s in find_head(model).levels if s == stride)
    last = producers[cls]  # the 1x1 Conv giving the class logits
    silu = producers[last.input[0]]  # Mul(x, Sigmoid(x))
    before = producers[silu.input[0]]  # the Conv whose output the SiLU takes
    assert last.op_type == "Conv" and silu.op_type == "Mul" and before.op_type == "Conv", "not a YOLOv8 head"

    def update(name: str, change) -> None:
        array = numpy_helper.to_array(inits[name]).copy()
        change(array)
        inits[name].CopyFrom(numpy_helper.from_array(array.astype(np.float32), name))

    weight = numpy_helper.to_array(inits[last.input[1]])
    assert weight.shape[2:] == (1, 1), "the class conv is expected to be 1x1"

    def lift(bias: np.ndarray) -> None:
        bias[0] += offset

    def take_back(bias: np.ndarray) -> None:
        bias -= weight[:, 0, 0, 0] * offset

    update(before.input[2], lift)
    update(last.input[2], take_back)
    onnx.save(model, str(dst))
    return dst
