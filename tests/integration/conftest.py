"""Fixtures shared by the integration tests."""

from __future__ import annotations

import pytest
from helpers import two_class_model

from npudure.model.build import BuildResult


@pytest.fixture(scope="session")
def two_class_onnx(tmp_path_factory: pytest.TempPathFactory) -> BuildResult:
    """The 2-class 320x320 ONNX model (helpers/two_class_model.py), built once for every module using it."""
    pytest.importorskip("onnxruntime")
    return two_class_model.build(tmp_path_factory.mktemp("two-class-model"))
