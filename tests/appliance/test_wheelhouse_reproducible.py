"""The npudure wheel is reproducible: two controllers with the same source (different paths, file
times and umask) build the same bytes, so the second one changes nothing on the fleet. No root."""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path

from helpers.role_scripts import ROOT, load_role_script


def _clone(dest: Path, mtime: float, mode: int) -> Path:
    """A copy of the sources as another controller's clone would have them."""
    dest.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (ROOT / name).is_file():
            shutil.copy(ROOT / name, dest / name)
    shutil.copytree(ROOT / "npudure", dest / "npudure", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for path in dest.rglob("*"):
        os.utime(path, (mtime, mtime))
        if path.is_file():
            path.chmod(mode)
    return dest


def test_two_clones_build_the_same_wheel(tmp_path: Path) -> None:
    build = load_role_script("npudure_wheelhouse", "build_wheelhouse")
    digests = []
    for i, (mtime, mode) in enumerate(((1_700_000_000, 0o644), (1_760_000_000, 0o664))):
        project = _clone(tmp_path / f"controller{i}" / "npudure-src", mtime, mode)
        wheels = tmp_path / f"wheels{i}"
        wheels.mkdir()
        name = build.build_npudure_wheel(sys.executable, project, wheels)
        digests.append((name, hashlib.sha256((wheels / name).read_bytes()).hexdigest()))
    assert digests[0] == digests[1], digests
