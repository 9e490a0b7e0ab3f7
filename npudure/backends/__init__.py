"""NPU backends behind one interface: ``rknn`` (the boards' NPU), ``onnx`` (CPU) and ``sim`` (emulated).

Vendor imports stay inside their backend module and happen only when that backend is chosen: a
machine without rknn-toolkit-lite2 fails at start-up with a clear message, never a silent fallback.
"""

from __future__ import annotations

from npudure.backends import memory
from npudure.backends.base import Backend, BackendError, Context, ContextResult
from npudure.backends.contexts import resolve as resolve_contexts
from npudure.config import BACKENDS, AgentConfig

__all__ = ["BACKENDS", "Backend", "BackendError", "Context", "ContextResult", "create_backend"]


def create_backend(config: AgentConfig, contexts: int | None = None) -> Backend:
    """Build the backend the config names (imports its runtime only now), with ``contexts`` contexts
    (None: what the config's ``contexts`` resolves to, npudure.backends.contexts)."""
    count = contexts or resolve_contexts(config).count
    if config.backend == "sim":
        from npudure.backends.sim import SimBackend

        memory.check(count, memory.SIM_CONTEXT_BYTES, "the sim's stated figure")
        # Named by its board: the board's models share one emulated NPU, as they share the real one.
        return SimBackend(
            count,
            config.sim,
            npu_cores=config.npu_cores,
            board=config.node_name,
            input_size=config.input_size,
            class_names=config.class_names,
        )
    if config.backend == "onnx":
        from npudure.backends.onnx import OnnxBackend

        return OnnxBackend(config, count)
    if config.backend == "rknn":
        from npudure.backends.rknn import RknnBackend

        return RknnBackend(config, count)
    raise BackendError(f"unknown backend {config.backend!r}; use one of: {', '.join(BACKENDS)}")
