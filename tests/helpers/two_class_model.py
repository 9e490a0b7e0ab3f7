"""The 2-class 320x320 model of the ONNX integration tests: ultralytics' standard single-output export
with its own names in its metadata (not COCO), so a label taken from the scheduler's COCO table instead
of the board's model would show. Built once a session (tests/integration/conftest.py)."""

from __future__ import annotations

from pathlib import Path

from npudure_workshop.lab.local import LocalCluster
from npudure_workshop.model.build import BuildResult, ensure_model

NAMES = ("forklift", "pallet")
SIZE = 320


def build(folder: Path) -> BuildResult:
    """The model in ``folder`` (ONNX and onnx required: callers importorskip onnxruntime first)."""
    return ensure_model("standard", nc=len(NAMES), size=SIZE, names=NAMES, path=folder / "two.onnx")


def one_board_cluster(model: BuildResult, http_api: bool = False) -> LocalCluster:
    """A scheduler and one ONNX Runtime board serving ``model``, not yet started (use it in ``with``).

    One NPU core and one ONNX thread: the integration tests check what comes back, and two cores are
    shared by the whole suite.
    """
    return LocalCluster(
        boards=1,
        backend="onnx",
        model=str(model.path),
        npu_cores=1,
        agent_overrides={"onnx_threads": 1},
        http_api=http_api,
    )
