"""``onnx``: YOLOv8 on the CPU with ONNX Runtime — real compute where there is no NPU.

One InferenceSession per context (``contexts``; auto: ``npu_cores`` of them), each with
``onnx_threads`` intra-op threads, so contexts run in parallel like NPU cores do. One session's memory
is measured (the RSS growth of making the first) and the rest are made only if they fit. The output
layout (split, concat or zoo) is read from the model's output shapes.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass

import numpy as np

from npudure.backends import contexts as context_count
from npudure.backends import memory
from npudure.backends.base import (
    INPUT_SIZE,
    BackendError,
    Context,
    ContextResult,
    ModelFileBackend,
    check_model_file,
)
from npudure.config import AgentConfig, PostprocessConfig
from npudure.vision.labels import NamesError, parse_names, resolve_names
from npudure.vision.model_io import ModelIOError, read_model_io
from npudure.vision.postprocess import Layout, postprocess_with

_REBUILD = "rebuild it with `npudure model build --force` (or copy the fleet's model again)"


def to_model_input(image: np.ndarray) -> np.ndarray:
    """HWC uint8 RGB → NCHW float32 in 0..1 (one pass, no intermediate float copy)."""
    nchw: np.ndarray = np.multiply(image.transpose(2, 0, 1)[None], np.float32(1 / 255), dtype=np.float32)
    return nchw  # (numpy types a ufunc with dtype= as Any)


@dataclass(frozen=True)
class _OnnxContext(Context):
    session: object  # an onnxruntime.InferenceSession (onnxruntime is imported only when used)
    input_name: str
    layout: Layout
    pp: PostprocessConfig
    input_size: int

    def self_test_output(self, image: np.ndarray) -> bytes:
        # The raw tensors: a random frame rarely shows an object, but its outputs are its own.
        outputs = self.session.run(None, {self.input_name: to_model_input(image)})  # type: ignore[attr-defined]
        return b"".join(np.ascontiguousarray(o).tobytes() for o in outputs)

    def run(self, image: np.ndarray) -> ContextResult:
        c0, t0 = time.thread_time_ns(), time.perf_counter()
        x = to_model_input(image)
        c1, t1 = time.thread_time_ns(), time.perf_counter()
        outputs = self.session.run(None, {self.input_name: x})  # type: ignore[attr-defined]
        c2, t2 = time.thread_time_ns(), time.perf_counter()
        detections = postprocess_with(outputs, self.pp, self.layout, self.input_size)
        t3 = time.perf_counter()
        cpu = {"preprocess": c1 - c0, "postprocess": time.thread_time_ns() - c2}
        return ContextResult(detections, t1 - t0, t2 - t1, t3 - t2, cpu_ns=cpu)


class OnnxBackend(ModelFileBackend):
    name = "onnx"

    def __init__(self, config: AgentConfig, contexts: int | None = None) -> None:
        try:
            import onnxruntime as ort
        except ImportError:
            raise BackendError(
                "the onnx backend needs ONNX Runtime, which is not installed: pip install 'npudure[onnx]'"
            ) from None
        path = check_model_file(config.model, "onnx", ".onnx", config.model_sha256)
        data = path.read_bytes()  # read once: every session loads the same bytes
        self._version = f"onnxruntime {ort.__version__}"
        self._sha256 = hashlib.sha256(data).hexdigest()  # of the bytes actually loaded
        self._contexts: list[Context] = []
        count = contexts or context_count.resolve(config).count
        per_session = 0
        for index in range(count):
            if index == 1:  # the first session's cost, now known, decides whether the rest fit
                memory.check(count, per_session, "the RSS growth of the first ONNX session", made=1)
            before = memory.rss_bytes()
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = config.onnx_threads
            opts.inter_op_num_threads = 1
            opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
            opts.log_severity_level = 3
            # Several sessions share the CPU: idle threads spinning for work would steal it.
            opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
            try:
                session = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
            except Exception as exc:
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise BackendError(
                    f"model file {path} cannot be loaded by ONNX Runtime ({first[:200]}): the file is "
                    f"corrupt or not an ONNX model; {_REBUILD}"
                ) from None
            if index == 0:  # at least the model's bytes: an allocator reusing freed memory hides growth
                per_session = max(memory.rss_bytes() - before, len(data))
            input_name, layout, self._input_size, nc = self._check_model(session, path, config)
            self._contexts.append(
                _OnnxContext(session, input_name, layout, config.postprocess, self._input_size)
            )
        meta = session.get_modelmeta().custom_metadata_map
        try:
            names = config.class_names or (parse_names(meta["names"]) if meta.get("names") else None)
            self._names = resolve_names(nc, names, "the agent config" if config.class_names else str(path))
        except NamesError as exc:
            raise BackendError(f"model file {path}: {exc}") from None

    @staticmethod
    def _check_model(session: object, path: object, config: AgentConfig) -> tuple[str, Layout, int, int]:
        """(input name, output layout, input side, class count), read from the model itself."""
        inputs = [(i.name, i.shape) for i in session.get_inputs()]  # type: ignore[attr-defined]
        outputs = [o.shape for o in session.get_outputs()]  # type: ignore[attr-defined]
        try:
            io = read_model_io(path, inputs, outputs, config.input_size, INPUT_SIZE)
        except ModelIOError as exc:
            raise BackendError(str(exc)) from None
        return io.input_name, io.layout, io.size, io.classes
