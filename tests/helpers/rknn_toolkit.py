"""When the real rknn-toolkit2 conversion can run here: the skip marks of its integration tests."""

from __future__ import annotations

import platform
import shutil
import sys

import pytest

# One place for both conversion test modules: the toolkit's wheels and its hash lock decide where it
# runs, not the test, so the two must skip on exactly the same machines.
TOOLKIT_MARKS = [
    pytest.mark.slow,
    pytest.mark.skipif(
        sys.platform != "linux" or platform.machine() != "x86_64",
        reason="rknn-toolkit2 runs on x86_64 Linux only",
    ),
    pytest.mark.skipif(
        sys.version_info[:2] != (3, 11) and shutil.which("python3.11") is None,
        reason="the toolkit's lock is for CPython 3.11, which this machine lacks",
    ),
]
