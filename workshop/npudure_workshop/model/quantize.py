"""Static INT8 (QDQ) quantization of the split-layout model with ONNX Runtime, on seeded frames.

Activations are uint8 and weights int8 per channel (U8S8): on x86 CPUs without VNNI, ONNX Runtime's
S8S8 kernels ran ~4x slower here than U8S8. The DFL decode tail stays in float (a softmax over 16
bins and pixel coordinates up to 640 lose too much at 8 bits); boxes and scores leave the graph as
two float outputs.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import numpy as np
import onnx

from npudure_workshop.model.calibrate import calibration_frames, to_nchw
from npudure_workshop.model.yolov8n import DECODE_PREFIX, INPUT_NAME

QUANT_FRAMES = 4


def quantize_int8(fp32_path: Path, out_path: Path, seed: int) -> None:
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    class _Frames(CalibrationDataReader):
        def __init__(self, frames: list[np.ndarray]) -> None:
            self._feeds = iter([{INPUT_NAME: to_nchw([f])} for f in frames])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self._feeds, None)

    model = onnx.load(str(fp32_path))
    outputs = {o.name for o in model.graph.output}
    keep_float = [n.name for n in model.graph.node if n.name.startswith(DECODE_PREFIX) or n.name in outputs]
    # Other frames than the BatchNorm calibration used, so the ranges are not fitted to those alone.
    frames = calibration_frames(seed, QUANT_FRAMES, purpose=2)
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # ORT logs "consider pre-processing" warnings to the root logger
    try:
        with tempfile.TemporaryDirectory(prefix="npudure-quant-") as tmp:
            # quantize_static writes its augmented calibration model next to the input: keep it in tmp.
            src = Path(tmp) / "fp32.onnx"
            onnx.save(model, str(src))
            quantize_static(
                str(src),
                str(out_path),
                _Frames(frames),
                quant_format=QuantFormat.QDQ,
                activation_type=QuantType.QUInt8,
                weight_type=QuantType.QInt8,
                per_channel=True,
                reduce_range=True,  # 7-bit weights: U8S8 on AVX2/AVX-512 (no VNNI) can saturate otherwise
                calibrate_method=CalibrationMethod.MinMax,
                nodes_to_exclude=keep_float,
            )
    finally:
        root.setLevel(level)
