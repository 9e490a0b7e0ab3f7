"""The rknn agent's start-up check: no librknnrt.so or no NPU device -> one clear line and exit 78.

A fake ``rknnlite`` package on PYTHONPATH stands in for the aarch64-only wheel; the real one on a real
arm64 board is exercised by tests/appliance/test_arm64_board.py (root, the lab).
"""

from __future__ import annotations

import sys
import types

import pytest

from npudure.backends import BackendError, create_backend
from npudure.backends import rknn as rknn_mod
from npudure.config import AgentConfig

FAKE_RKNNLITE = """
class RKNNLite:
    NPU_CORE_0, NPU_CORE_1, NPU_CORE_2 = 1, 2, 4
    def load_rknn(self, path):
        raise AssertionError("the start-up check must refuse before any context is made")
"""


def test_missing_npu_device_is_named(monkeypatch, tmp_path) -> None:
    lib = tmp_path / "librknnrt.so"
    lib.write_bytes(b"librknnrt version: 2.5.0\0")
    monkeypatch.setattr(rknn_mod, "LIBRKNNRT", str(lib))
    monkeypatch.setattr(rknn_mod, "NPU_DEVICE_GLOBS", (str(tmp_path / "dev" / "rknpu*"),))
    # In sys.modules only for this test (monkeypatch restores it): no fake left for later tests.
    package, api = types.ModuleType("rknnlite"), types.ModuleType("rknnlite.api")
    exec(FAKE_RKNNLITE, api.__dict__)
    package.api = api  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "rknnlite", package)
    monkeypatch.setitem(sys.modules, "rknnlite.api", api)
    model = tmp_path / "m.rknn"
    model.write_bytes(b"x")
    with pytest.raises(BackendError) as info:
        create_backend(AgentConfig(node_name="b1", backend="rknn", model=str(model)))
    assert isinstance(info.value, rknn_mod.RknnRuntimeMissing)
    assert getattr(info.value, "exit_code", None) == 78
    assert "no NPU device (/dev/rknpu or /dev/dri/renderD*)" in str(info.value)
    # With the device node present the check passes (and the fake's load_rknn is reached).
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "rknpu").write_bytes(b"")
    rknn_mod.check_npu_runtime()
