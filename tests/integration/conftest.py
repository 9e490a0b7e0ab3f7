"""Fixtures shared by the integration tests.

Imports stay inside the fixtures: this file is loaded for every integration test, including those run
on the boards' Pythons without the `onnx` extra (tests/integration/test_board_pythons.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from npudure_workshop.model.build import BuildResult


@pytest.fixture(scope="session")
def two_class_onnx(tmp_path_factory: pytest.TempPathFactory) -> BuildResult:
    """The 2-class 320x320 ONNX model (helpers/two_class_model.py), built once for every module using it."""
    pytest.importorskip("onnxruntime")
    from helpers import two_class_model

    return two_class_model.build(tmp_path_factory.mktemp("two-class-model"))
