"""The two wheels are reproducible, the runtime's (npudure) and the workshop's (npudure-workshop): two
controllers with the same source (different paths, file times and umask) build the same bytes, so the
second one changes nothing on the fleet. No root."""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

from helpers.role_scripts import load_role_script

from npudure_workshop.faults.fleet import frozen_source


def _clone(dest: Path, mtime: float, mode: int) -> Path:
    """A copy of the sources as another controller's clone would have them."""
    dest.mkdir(parents=True)
    frozen_source(dest)
    for path in dest.rglob("*"):
        os.utime(path, (mtime, mtime))
        if path.is_file():
            path.chmod(mode)
    return dest


def test_two_clones_build_the_same_wheels(tmp_path: Path) -> None:
    build = load_role_script("npudure_wheelhouse", "build_wheelhouse")
    digests = []
    for i, (mtime, mode) in enumerate(((1_700_000_000, 0o644), (1_760_000_000, 0o664))):
        project = _clone(tmp_path / f"controller{i}" / "npudure-src", mtime, mode)
        wheels = tmp_path / f"wheels{i}"
        wheels.mkdir()
        names = [build.build_npudure_wheel(sys.executable, project, wheels)]
        names.append(build.build_workshop_wheel(sys.executable, project, wheels))
        digests.append([(name, hashlib.sha256((wheels / name).read_bytes()).hexdigest()) for name in names])
    assert [name for name, _ in digests[0]] == [
        "npudure-0.1.0-py3-none-any.whl",
        "npudure_workshop-0.1.0-py3-none-any.whl",
    ]
    assert digests[0] == digests[1], digests
