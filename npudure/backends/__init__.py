"""NPU backends behind one interface: ``rknn`` (the boards' NPU), ``onnx`` (CPU) and ``sim`` (emulated).

Vendor imports stay inside their backend module and happen only when that backend is chosen: a
machine without rknn-toolkit-lite2 fails at start-up with a clear message, never a silent fallback.
"""

from __future__ import annotations

from npudure.backends.base import Backend, BackendError, Context, ContextResult
from npudure.config import BACKENDS, AgentConfig

__all__ = ["BACKENDS", "Backend", "BackendError", "Context", "ContextResult", "create_backend"]


def create_backend(config: AgentConfig) -> Backend:
    """Build the backend the config names (imports its runtime only now)."""
    if config.backend == "sim":
        from npudure.backends.sim import SimBackend

        return SimBackend(config.npu_cores, config.sim)
    if config.backend == "onnx":
        from npudure.backends.onnx import OnnxBackend

        return OnnxBackend(config)
    if config.backend == "rknn":
        from npudure.backends.rknn import RknnBackend

        return RknnBackend(config)
    raise BackendError(f"unknown backend {config.backend!r}; use one of: {', '.join(BACKENDS)}")
