"""``rknn``: YOLOv8 on the Rockchip NPU through rknn-toolkit-lite2 (RKNNLite).

One RKNNLite context per agent context (``contexts``, not the core count), each used by one worker
thread: a context shared between threads gave another thread's answer. Each context's core mask
follows ``core_mask``, chosen from the reference's RK3576 figures (2 cores, 8 contexts):

* ``auto`` (default): NPU_CORE_AUTO for every context, the runtime places each run. The best measured:
  16.7 / 36.2 / 52.4 / 72.9 inf/s with 1 / 2 / 4 / 8 contexts.
* ``per_core``: context i on core i % npu_cores (NPU_CORE_0, _1, _2): +0.1% at 8 contexts, noise.
* ``all``: every context on every core (NPU_CORE_0_1, NPU_CORE_0_1_2 on an RK3588): 11.5% slower.

The model is the rknn_model_zoo layout (9 outputs, any class count) converted with rknn-toolkit2 on
x86 (docs/model.md). Outputs are float: rknn-toolkit-lite2 2.5.0's ``inference`` has no parameter for
integer outputs (its C runtime's ``want_float`` is not reachable from Python; docs/model.md). Its input
size and class names come from the ``.rknn.json`` beside it (or the agent config). This backend never
falls back to another: without the toolkit or the NPU it refuses to start.
"""

from __future__ import annotations

import contextlib
import glob
import importlib.metadata
import json
import mmap
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from npudure.backends import contexts as context_count
from npudure.backends import memory
from npudure.backends.base import (
    BackendError,
    Context,
    ContextResult,
    ModelFileBackend,
    check_model_file,
    sha256_file,
)
from npudure.config import AgentConfig, PostprocessConfig
from npudure.vision.frames import INPUT_SIZE
from npudure.vision.labels import COCO80, NamesError, check_names, resolve_names
from npudure.vision.postprocess import Layout, detect_layout, postprocess_with

LIBRKNNRT = "/usr/lib/librknnrt.so"
# Where else the dynamic loader finds it on Debian/Ubuntu board images.
LIBRKNNRT_ALTERNATIVES = ("/usr/lib/aarch64-linux-gnu/librknnrt.so", "/usr/local/lib/librknnrt.so")
NPU_DEVICE_GLOBS = ("/dev/rknpu*", "/dev/dri/renderD*")
# sysexits EX_CONFIG: the machine is not set up for this backend; systemd should not restart in a loop.
EX_CONFIG = 78
MAX_NPU_CORES = 3  # RK3588; the RK3576 has 2
_VERSION_MARK = b"librknnrt version: "

_INSTALL = (
    "the rknn backend needs rknn-toolkit-lite2 (Python wheels for aarch64 boards only) and the vendor "
    f"runtime library {LIBRKNNRT}: on the board run `pip install 'npudure[rknn]'` (or "
    "`pip install rknn-toolkit-lite2`) and install librknnrt.so of the same version from "
    "github.com/airockchip/rknn-toolkit2 (rknpu2/runtime/Linux/librknn_api/aarch64) to /usr/lib. "
    "It never falls back to another backend: on a machine without an NPU set `backend: onnx` (CPU) "
    "or `backend: sim` (emulated) in the agent config"
)


class RknnRuntimeMissing(BackendError):
    """The board lacks the NPU runtime library or the NPU device: a set-up error, not a crash."""

    exit_code = EX_CONFIG


def find_librknnrt() -> str | None:
    for path in (LIBRKNNRT, *LIBRKNNRT_ALTERNATIVES):
        if os.path.isfile(path):
            return path
    return None


def check_npu_runtime() -> None:
    """Refuse to start, naming the missing file and the fix, before any RKNNLite context is made
    (without the library, init_runtime fails deep in the vendor code with a less useful message)."""
    if find_librknnrt() is None:
        raise RknnRuntimeMissing(
            f"rknn backend: {LIBRKNNRT} is missing (Rockchip's NPU runtime library, which "
            "rknn-toolkit-lite2 does not ship). Fix: copy librknnrt.so of the version the model was "
            "converted with (the .rknn.json beside the model names it) from rknn-toolkit2's "
            f"rknpu2/runtime/Linux/librknn_api/aarch64/ to {LIBRKNNRT} (Ansible: set "
            "npudure_rknn_runtime_src), or on a machine without an NPU set `backend: onnx` or `backend: sim`"
        )
    if not any(glob.glob(pattern) for pattern in NPU_DEVICE_GLOBS):
        raise RknnRuntimeMissing(
            "rknn backend: no NPU device (/dev/rknpu or /dev/dri/renderD*). Fix: boot a vendor kernel with "
            "the rknpu driver (`dmesg | grep -i rknpu` shows it loading); in a container, pass the device "
            "in; on a machine without an NPU set `backend: onnx` or `backend: sim`"
        )


def read_librknnrt_version(path: str | os.PathLike[str] = LIBRKNNRT) -> str | None:
    """The version string embedded in librknnrt.so ("librknnrt version: X"), or None."""
    try:
        with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            at = data.find(_VERSION_MARK)
            if at < 0:
                return None
            tail = data[at + len(_VERSION_MARK) : at + len(_VERSION_MARK) + 200]
    except (OSError, ValueError):  # missing, unreadable, or empty (mmap of 0 bytes)
        return None
    text = tail.split(b"\0", 1)[0].splitlines()[0] if tail else b""
    version = text.decode("ascii", "replace").strip()
    return version or None


def core_mask(lite_class: type, mode: str, index: int, cores: int) -> int:
    """The core mask of context ``index`` under AgentConfig.core_mask ``mode`` on ``cores`` NPU cores
    (RKNNLite's constants, with the documented values where a toolkit lacks one)."""
    if mode == "auto":
        return int(getattr(lite_class, "NPU_CORE_AUTO", 0))
    if mode == "per_core":
        core = index % cores
        return int(getattr(lite_class, f"NPU_CORE_{core}", 1 << core))
    name = {1: "NPU_CORE_0", 2: "NPU_CORE_0_1", 3: "NPU_CORE_0_1_2"}[cores]
    return int(getattr(lite_class, name, (1 << cores) - 1))


def _init_hints(path: Path) -> str:
    """What is likely wrong when load_rknn/init_runtime fails, from what this machine shows."""
    hints = []
    lib = read_librknnrt_version(LIBRKNNRT)
    if not Path(LIBRKNNRT).exists():
        hints.append(f"{LIBRKNNRT} is missing (install the vendor runtime)")
    else:
        hints.append(
            f"{LIBRKNNRT} is version {lib or 'unknown'}: it must match the rknn-toolkit2 that converted "
            f"{path.name} ('Invalid RKNN model version' in the log means it does not)"
        )
    nodes = glob.glob("/dev/rknpu*") + glob.glob("/dev/dri/renderD*")
    if not nodes:
        hints.append("no NPU device (/dev/rknpu or /dev/dri/renderD*): the kernel lacks the rknpu driver")
    else:
        hints.append(
            f"the NPU device ({', '.join(sorted(nodes))}) needs read/write access: run as root or add "
            "the agent's user to the video and render groups"
        )
    hints.append("the model must be converted for this SoC (target_platform rk3576 or rk3588)")
    return "; ".join(hints)


def model_record(path: Path, config: AgentConfig) -> tuple[int, tuple[str, ...]]:
    """(input side, class names) for an .rknn, which holds neither in a form RKNNLite reads: the agent
    config's ``input_size``/``class_names`` first, else the ``.rknn.json`` that `npudure model convert`
    wrote beside the model, else npudure's own model (640, COCO-80)."""
    record: dict = {}
    beside = path.with_name(path.name + ".json")
    if beside.is_file():
        try:
            record = json.loads(beside.read_text())
        except (OSError, ValueError) as exc:
            raise BackendError(f"{beside} is not readable JSON ({exc}): convert the model again") from None
    size = config.input_size or int(record.get("input_size") or INPUT_SIZE)
    try:
        names = config.class_names or (check_names(record["names"]) if record.get("names") else None)
        nc = int(record.get("num_classes") or (len(names) if names else len(COCO80)))
        source = "the agent config" if config.class_names else str(beside)
        return size, resolve_names(nc, names, source)
    except (NamesError, TypeError, ValueError) as exc:
        raise BackendError(f"model file {path}: {exc}") from None


class _RknnContext(Context):
    def __init__(
        self, lite: object, index: int, mask: int, pp: PostprocessConfig, input_size: int = INPUT_SIZE
    ) -> None:
        self._lite = lite
        self.index = index
        self.mask = mask
        self._pp = pp
        self._size = input_size
        self._layout: Layout | None = None
        self._released = False

    @staticmethod
    def _batch(image: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(image)[None]  # NHWC uint8; the NPU does the /255 itself

    def _infer(self, batch: np.ndarray) -> list[np.ndarray]:
        outputs = self._lite.inference(inputs=[batch], data_format=["nhwc"])  # type: ignore[attr-defined]
        if outputs is None:
            raise BackendError(
                f"NPU context {self.index}: RKNNLite.inference returned no outputs (see the rknn log "
                "above; an NPU hang or a driver error)"
            )
        return list(outputs)

    def run(self, image: np.ndarray) -> ContextResult:
        c0, t0 = time.thread_time_ns(), time.perf_counter()
        batch = self._batch(image)
        c1, t1 = time.thread_time_ns(), time.perf_counter()
        outputs = self._infer(batch)
        c2, t2 = time.thread_time_ns(), time.perf_counter()
        if self._layout is None:
            self._layout = detect_layout([np.shape(o) for o in outputs])
        detections = postprocess_with(outputs, self._pp, self._layout, self._size)
        t3 = time.perf_counter()
        cpu = {"preprocess": c1 - c0, "postprocess": time.thread_time_ns() - c2}
        return ContextResult(detections, t1 - t0, t2 - t1, t3 - t2, cpu_ns=cpu)

    def self_test_output(self, image: np.ndarray) -> bytes:
        # The raw tensors: a random frame rarely shows an object, but its outputs are its own.
        return b"".join(np.ascontiguousarray(o).tobytes() for o in self._infer(self._batch(image)))

    def close(self) -> None:
        if not self._released:
            self._released = True
            self._lite.release()  # type: ignore[attr-defined]


class RknnBackend(ModelFileBackend):
    name = "rknn"

    def __init__(self, config: AgentConfig, contexts: int | None = None) -> None:
        try:
            from rknnlite.api import RKNNLite
        except ImportError:
            raise BackendError(_INSTALL) from None
        path = check_model_file(config.model, "rknn", ".rknn", config.model_sha256)
        if config.npu_cores > MAX_NPU_CORES:
            raise BackendError(
                f"npu_cores is {config.npu_cores}, but Rockchip NPUs have at most {MAX_NPU_CORES} cores: "
                "set npu_cores to 2 on an RK3576 or 3 on an RK3588"
            )
        count = contexts or context_count.resolve(config).count
        memory.check(
            count,
            memory.rknn_context_bytes(path.stat().st_size),
            f"an estimate: {memory.RKNN_BYTES_PER_MODEL_BYTE} x the .rknn file + "
            f"{memory.RKNN_CONTEXT_OVERHEAD // memory.MiB} MiB",
        )
        check_npu_runtime()
        self._input_size, self._names = model_record(path, config)
        self._sha256 = sha256_file(path)
        # Kept to re-create a hung context (new_context).
        self._lite_class, self._path, self._pp = RKNNLite, path, config.postprocess
        self._mode, self._cores = config.core_mask, config.npu_cores
        self._contexts: list[Context] = []
        try:
            for index in range(count):
                self._contexts.append(self._open(index))
        except BaseException:
            self.close()
            raise
        self._version = self._runtime_version()

    @staticmethod
    def _call(fn: Callable[..., object], *args: object, **kwargs: object) -> str | None:
        """Call a toolkit function that returns 0 on success: None, or what went wrong, as a phrase."""
        try:
            ret = fn(*args, **kwargs)
        except Exception as exc:  # the toolkit raises as well as returning codes
            return f"returned an error ({type(exc).__name__}: {exc})"
        return None if ret == 0 else f"returned {ret}"

    def _runtime_version(self) -> str:
        lite = self._contexts[0]._lite if self._contexts else None  # type: ignore[attr-defined]
        get = getattr(lite, "get_sdk_version", None)
        if callable(get):
            try:
                sdk = get()
            except Exception:
                sdk = None
            if isinstance(sdk, str) and sdk.strip():
                return "rknnrt " + " ".join(sdk.split())
        lib = read_librknnrt_version(LIBRKNNRT)
        if lib:
            return f"librknnrt {lib}"
        try:
            return f"rknn-toolkit-lite2 {importlib.metadata.version('rknn-toolkit-lite2')}"
        except importlib.metadata.PackageNotFoundError:
            return "unknown"

    def close(self) -> None:
        for ctx in self._contexts:
            with contextlib.suppress(Exception):  # release the others even if one fails
                ctx.close()

    def _open(self, index: int) -> _RknnContext:
        """Context ``index``: a new RKNNLite with the model loaded, on its core mask. On failure it is
        released and the error names the context, the call, its code and the likely causes."""
        mask = core_mask(self._lite_class, self._mode, index, self._cores)
        lite = self._lite_class()
        ctx = _RknnContext(lite, index, mask, self._pp, self._input_size)
        failed = self._call(lite.load_rknn, str(self._path))
        if failed:
            reason = (
                f"load_rknn({self._path}) {failed}: the file is not a valid .rknn model for this runtime; "
                f"{_init_hints(self._path)}"
            )
        else:
            failed = self._call(lite.init_runtime, core_mask=mask)
            reason = f"init_runtime(core_mask={mask}) {failed}; likely causes: {_init_hints(self._path)}"
        if failed:
            with contextlib.suppress(Exception):
                ctx.close()
            raise BackendError(f"NPU context {index}: {reason}")
        return ctx

    def new_context(self, index: int) -> Context:
        """A new RKNNLite context in slot ``index`` on that slot's core mask (hung-context recovery)."""
        return self._open(index)


__all__ = [
    "EX_CONFIG",
    "LIBRKNNRT",
    "RknnBackend",
    "RknnRuntimeMissing",
    "check_npu_runtime",
    "read_librknnrt_version",
]
