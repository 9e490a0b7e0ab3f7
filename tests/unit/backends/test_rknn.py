"""The rknn backend without a board: a missing toolkit, and a fake ``rknnlite`` returning planted
zoo-layout tensors."""

from __future__ import annotations

import sys
import types
from typing import ClassVar

import numpy as np
import pytest

from npudure.backends import BackendError, create_backend, memory
from npudure.backends import rknn as rknn_mod
from npudure.backends.rknn import RknnBackend, read_librknnrt_version
from npudure.config import AgentConfig

# A box at (120, 168)-(232, 280): stride-16 cell (10, 12), sides l=3 t=2 r=4 b=5 strides; class 7.
PLANTED = [120.0, 168.0, 232.0, 280.0, 0.9, 7.0]


def zoo_outputs() -> list[np.ndarray]:
    outs = []
    for s in (8, 16, 32):
        hw = 640 // s
        outs += [
            np.zeros((1, 64, hw, hw), np.float32),
            np.full((1, 80, hw, hw), 0.01, np.float32),
            np.zeros((1, 1, hw, hw), np.float32),
        ]
    box, cls = outs[3], outs[4]
    for side, dist in enumerate((3, 2, 4, 5)):
        box[0, side * 16 : side * 16 + 16, 12, 10] = -30.0
        box[0, side * 16 + dist, 12, 10] = 30.0
    cls[0, 7, 12, 10] = 0.9
    return outs


class FakeRKNNLite:
    NPU_CORE_AUTO, NPU_CORE_0, NPU_CORE_1, NPU_CORE_2, NPU_CORE_0_1 = 0, 1, 2, 4, 3
    instances: ClassVar[list[FakeRKNNLite]] = []
    init_ret = 0
    load_ret = 0

    def __init__(self) -> None:
        self.loaded: str | None = None
        self.core_mask: int | None = None
        self.released = 0
        self.inputs: list = []
        FakeRKNNLite.instances.append(self)

    def load_rknn(self, path: str) -> int:
        self.loaded = path
        return FakeRKNNLite.load_ret

    def init_runtime(self, core_mask: int = 0) -> int:
        self.core_mask = core_mask
        return FakeRKNNLite.init_ret if core_mask == FakeRKNNLite.NPU_CORE_1 else 0

    def inference(self, inputs, data_format=None):
        self.inputs.append((inputs, data_format))
        return zoo_outputs()

    def get_sdk_version(self) -> str:
        return "API: 2.3.2 (fake)\nDRV: rknnrt: 2.3.2 (fake)"

    def release(self) -> None:
        self.released += 1


@pytest.fixture(autouse=True)
def npu_runtime_present(monkeypatch, tmp_path):
    """A board's runtime library and NPU device node, as files in tmp (the start-up check looks)."""
    lib = tmp_path / "librknnrt.so"
    lib.write_bytes(b"librknnrt version: 2.3.2 (fake)\0")
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "rknpu").write_bytes(b"")
    monkeypatch.setattr(rknn_mod, "LIBRKNNRT", str(lib))
    monkeypatch.setattr(rknn_mod, "NPU_DEVICE_GLOBS", (str(tmp_path / "dev" / "rknpu*"),))


@pytest.fixture
def fake_rknnlite(monkeypatch):
    FakeRKNNLite.instances = []
    FakeRKNNLite.init_ret = 0
    FakeRKNNLite.load_ret = 0
    package = types.ModuleType("rknnlite")
    api = types.ModuleType("rknnlite.api")
    api.RKNNLite = FakeRKNNLite  # type: ignore[attr-defined]
    package.api = api  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "rknnlite", package)
    monkeypatch.setitem(sys.modules, "rknnlite.api", api)
    return FakeRKNNLite


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "yolov8n.rknn"
    path.write_bytes(b"RKNN fake model")
    return path


def _config(model, cores: int = 3, **kw) -> AgentConfig:
    return AgentConfig(node_name="b1", backend="rknn", model=str(model), npu_cores=cores, **kw)


def test_without_the_toolkit_the_error_says_what_to_install(monkeypatch, model) -> None:
    monkeypatch.setitem(sys.modules, "rknnlite", None)
    with pytest.raises(BackendError) as info:
        create_backend(_config(model))
    text = str(info.value)
    assert "rknn-toolkit-lite2" in text and "aarch64" in text and "/usr/lib/librknnrt.so" in text
    assert "never falls back" in text


@pytest.mark.parametrize(
    ("mode", "cores", "contexts", "masks"),
    [
        ("auto", 2, 8, [0] * 8),  # the runtime places each run: the reference's best
        ("per_core", 3, 6, [1, 2, 4, 1, 2, 4]),  # context i on core i % cores
        ("per_core", 2, 3, [1, 2, 1]),
        ("all", 2, 3, [3, 3, 3]),  # NPU_CORE_0_1
        ("all", 3, 2, [7, 7]),  # NPU_CORE_0_1_2 (the fake lacks the constant: its documented value)
    ],
)
def test_one_rknnlite_per_context_with_the_configured_mask(
    fake_rknnlite, model, mode: str, cores: int, contexts: int, masks: list[int]
) -> None:
    backend = create_backend(_config(model, cores=cores, contexts=contexts, core_mask=mode))
    assert isinstance(backend, RknnBackend)
    assert [f.core_mask for f in fake_rknnlite.instances] == masks
    assert all(f.loaded == str(model) for f in fake_rknnlite.instances)
    assert len(backend.contexts) == contexts
    assert backend.runtime_version == "rknnrt API: 2.3.2 (fake) DRV: rknnrt: 2.3.2 (fake)"
    assert len(backend.model_sha256) == 64
    backend.close()
    backend.close()  # idempotent: each context released exactly once
    assert [f.released for f in fake_rknnlite.instances] == [1] * contexts


def test_auto_takes_the_count_recorded_beside_the_model(fake_rknnlite, model) -> None:
    model.with_name(model.name + ".json").write_text('{"input_size": 640, "contexts": 5}')
    backend = create_backend(_config(model, cores=2))
    assert len(backend.contexts) == 5
    backend.close()


def test_more_contexts_than_memory_holds_are_refused_before_any_is_made(
    fake_rknnlite, model, monkeypatch, tmp_path
) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 4000000 kB\nMemAvailable: 204800 kB\n")  # 200 MiB
    monkeypatch.setattr(memory, "MEMINFO", str(meminfo))
    with pytest.raises(memory.ContextMemoryError) as info:
        create_backend(_config(model, cores=2, contexts=8))
    # 8 x (3 x 15 bytes + 32 MiB) = 256 MiB > 200 MiB: 6 fit.
    assert str(info.value).startswith("8 contexts need 8 x 32 MiB (an estimate: 3 x the .rknn file + 32 MiB)")
    assert "MemAvailable is 200 MiB" in str(info.value) and "set contexts to 6 or fewer" in str(info.value)
    assert fake_rknnlite.instances == []
    assert len(create_backend(_config(model, cores=2, contexts=6)).contexts) == 6


def test_run_returns_the_planted_detection(fake_rknnlite, model) -> None:
    backend = RknnBackend(_config(model, cores=2, contexts=2))
    frame = np.random.default_rng(0).integers(0, 256, (640, 640, 3), dtype=np.uint8)
    result = backend.contexts[1].run(frame)
    np.testing.assert_allclose(result.detections, [PLANTED], atol=1e-3)
    (inputs, data_format), *_ = fake_rknnlite.instances[1].inputs
    assert data_format == ["nhwc"]
    assert inputs[0].shape == (1, 640, 640, 3) and inputs[0].dtype == np.uint8
    assert np.array_equal(inputs[0][0], frame)
    assert fake_rknnlite.instances[0].inputs == []  # context 1 used its own RKNNLite only
    assert result.inference_s >= 0 and result.postprocess_s > 0
    backend.close()


def test_init_failure_names_context_mask_code_and_causes_and_releases(fake_rknnlite, model) -> None:
    fake_rknnlite.init_ret = -6
    with pytest.raises(BackendError) as info:
        RknnBackend(_config(model, cores=3, contexts=3, core_mask="per_core"))
    text = str(info.value)
    assert "NPU context 1" in text and "returned -6" in text and "core_mask=2" in text
    assert "Invalid RKNN model version" in text or "librknnrt.so is missing" in text
    assert "video and render groups" in text or "rknpu" in text
    # The contexts created so far are released; no third one was started.
    assert [f.released for f in fake_rknnlite.instances] == [1, 1]


def test_load_failure_is_reported(fake_rknnlite, model) -> None:
    fake_rknnlite.load_ret = -1
    with pytest.raises(BackendError, match=r"NPU context 0: load_rknn\(.*\) returned -1"):
        RknnBackend(_config(model, cores=2, contexts=2))


def test_model_checks_and_core_limit(fake_rknnlite, tmp_path, model) -> None:
    with pytest.raises(BackendError, match="does not exist"):
        RknnBackend(_config(tmp_path / "missing.rknn"))
    onnx_file = tmp_path / "m.onnx"
    onnx_file.write_bytes(b"x")
    with pytest.raises(BackendError, match=r"not a \.rknn file"):
        RknnBackend(_config(onnx_file))
    with pytest.raises(BackendError, match="at most 3 cores"):
        RknnBackend(_config(model, cores=4))
    assert fake_rknnlite.instances == []


def test_read_librknnrt_version(tmp_path) -> None:
    lib = tmp_path / "librknnrt.so"
    lib.write_bytes(
        b"\x7fELF" + b"\0" * 5000 + b"librknnrt version: 2.3.2 (429f97ae6b@2025-04-09T09:09:27)\0tail"
    )
    assert read_librknnrt_version(lib) == "2.3.2 (429f97ae6b@2025-04-09T09:09:27)"
    plain = tmp_path / "other.so"
    plain.write_bytes(b"\x7fELF no version here")
    assert read_librknnrt_version(plain) is None
    empty = tmp_path / "empty.so"
    empty.write_bytes(b"")
    assert read_librknnrt_version(empty) is None
    assert read_librknnrt_version(tmp_path / "missing.so") is None


def test_runtime_version_falls_back_to_the_library(fake_rknnlite, model, monkeypatch, tmp_path) -> None:
    lib = tmp_path / "librknnrt.so"
    lib.write_bytes(b"librknnrt version: 2.1.0 (x)\0")
    monkeypatch.setattr(rknn_mod, "LIBRKNNRT", str(lib))
    monkeypatch.delattr(FakeRKNNLite, "get_sdk_version")
    backend = RknnBackend(_config(model, cores=1))
    assert backend.runtime_version == "librknnrt 2.1.0 (x)"
    backend.close()


@pytest.mark.parametrize(("mode", "mask"), [("per_core", 4), ("auto", 0)])
def test_a_hung_context_is_remade_on_its_slots_mask(fake_rknnlite, model, mode: str, mask: int) -> None:
    backend = RknnBackend(_config(model, cores=3, contexts=6, core_mask=mode))
    fresh = backend.new_context(5)
    assert fake_rknnlite.instances[-1].core_mask == mask and fake_rknnlite.instances[-1].loaded == str(model)
    assert fresh.run(np.zeros((640, 640, 3), dtype=np.uint8)).detections.shape[1] == 6


def test_a_context_that_cannot_be_remade_is_named_and_released(fake_rknnlite, model) -> None:
    backend = RknnBackend(_config(model, cores=3, contexts=6, core_mask="per_core"))
    fake_rknnlite.init_ret = -1  # the fake refuses NPU_CORE_1: slot 4 is on core 4 % 3 = 1
    with pytest.raises(BackendError, match=r"NPU context 4: init_runtime\(core_mask=2\) returned -1"):
        backend.new_context(4)
    assert fake_rknnlite.instances[-1].released == 1  # the failed one is released, not leaked
