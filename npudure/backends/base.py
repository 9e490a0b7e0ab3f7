"""The one small interface every NPU backend implements.

A backend owns N inference *contexts* (AgentConfig.contexts; several per NPU core on RKNN). A context
is used by one worker thread at a time — the rule from the reference: a context shared between threads
returned another thread's answer (200 of 200 times, with no API error) and has crashed kernels. The
agent's worker pool enforces that (npudure.agent.pool) and checks it at start (npudure.agent.selftest);
backends need not lock.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from npudure.vision.frames import FRAME_BYTES, FRAME_SHAPE, INPUT_SIZE  # noqa: F401 (re-exported for backends)
from npudure.vision.labels import COCO80


class BackendError(Exception):
    """A backend cannot start or run; the message names the thing and the fix."""


@dataclass(frozen=True, slots=True)
class ContextResult:
    # (N, 6) float32 rows: x1, y1, x2, y2, score, class_id — boxes in the model's input pixels.
    detections: np.ndarray
    preprocess_s: float
    inference_s: float
    postprocess_s: float
    # Handing the input to the NPU, where the runtime separates it from inference (else 0).
    npu_input_s: float = 0.0
    # The calling thread's CPU nanoseconds by stage ("preprocess", "npu_input", "postprocess"), where
    # the backend measures them; the worker pool counts the rest of run() as "inference".
    cpu_ns: dict[str, int] | None = None


NO_DETECTIONS = np.zeros((0, 6), dtype=np.float32)


class Context(ABC):
    """One inference context; ``run`` takes an S x S x 3 uint8 RGB frame (S = the backend's input_size)."""

    @abstractmethod
    def run(self, image: np.ndarray) -> ContextResult: ...

    def self_test_output(self, image: np.ndarray) -> bytes:
        """What the start-up self-test compares between a run alongside the other contexts and a solo
        run of the same frame: the detections here; model backends return their raw output tensors,
        which differ between two random frames even when neither shows an object."""
        detections = self.run(image).detections
        return repr(detections.shape).encode() + np.ascontiguousarray(detections).tobytes()

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release the context (RKNN contexts must be released explicitly)."""


class Backend(ABC):
    name: str
    # True when no real model runs (figures fed by it are emulated and say so).
    emulated: bool = False
    # Set by a backend whose model differs from the default 640x640 COCO-80.
    _input_size: int = INPUT_SIZE
    _names: tuple[str, ...] = COCO80

    @property
    @abstractmethod
    def contexts(self) -> list[Context]: ...

    @property
    def runtime_version(self) -> str:
        return "unknown"

    @property
    def model_sha256(self) -> str:
        return ""

    @property
    def input_size(self) -> int:
        """The side of the square frame the model takes (read from the model, never assumed)."""
        return self._input_size

    @property
    def class_names(self) -> tuple[str, ...]:
        """The model's class names by class id ("" where the model names none)."""
        return self._names

    @property
    def cpu_cap_mhz(self) -> int | None:
        """The emulated CPU cap, for backends that model one; None otherwise."""
        return None

    def set_cpu_cap(self, mhz: int | None) -> None:
        raise BackendError(
            f"the {self.name} backend has no emulated CPU cap; on a real board cap the clock "
            "through scaling_max_freq (npudure.board.cpufreq)"
        )

    def new_context(self, index: int) -> Context:
        """A fresh context in slot ``index``, to replace one that hung (the pool releases the old one)."""
        raise BackendError(f"the {self.name} backend cannot re-create a context")

    def emulation_totals(self) -> tuple[float, float] | None:
        """(modelled, achieved) service seconds summed over every frame, for emulated backends; None
        for real ones. Their ratio says whether the emulation kept up with its model."""
        return None

    def inject_fault(self, hang: bool) -> None:
        raise BackendError(f"fault injection is for emulated boards; the {self.name} backend is real")

    def close(self) -> None:
        for ctx in self.contexts:
            ctx.close()


class ModelFileBackend(Backend):
    """A backend that runs a model file: subclasses set ``_contexts``, ``_version`` and ``_sha256``,
    and ``_input_size`` and ``_names`` when the model differs from the default 640x640 COCO-80."""

    _contexts: list[Context]
    _version: str
    _sha256: str

    @property
    def contexts(self) -> list[Context]:
        return self._contexts

    @property
    def runtime_version(self) -> str:
        return self._version

    @property
    def model_sha256(self) -> str:
        return self._sha256


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_model_file(path: str | None, backend: str, suffix: str, expected_sha256: str | None) -> Path:
    """Return the model path after checking it exists, has the right kind and (optionally) hash."""
    if not path:
        raise BackendError(
            f"the {backend} backend needs a model: set `model:` in the agent config to a {suffix} file"
            + (" (build one with `npudure model build`)" if backend == "onnx" else "")
        )
    model = Path(path)
    if not model.is_file():
        raise BackendError(
            f"model file {model} does not exist: copy the {suffix} file there or fix `model:` in the "
            "agent config"
        )
    if model.suffix != suffix:
        raise BackendError(f"model file {model} is not a {suffix} file, which the {backend} backend needs")
    if expected_sha256:
        actual = sha256_file(model)
        if actual != expected_sha256:
            raise BackendError(
                f"model file {model} has sha256 {actual}, but the config expects {expected_sha256}: "
                "the file is corrupt or not the fleet's model; copy the right one (ansible-playbook "
                "playbooks/site.yml does)"
            )
    return model
