"""The two wings are released together (docs/adr/0018-two-wings.md): npudure-workshop has npudure's
version and requires exactly that npudure, so a controller never drives a runtime of another release."""

from __future__ import annotations

import tomllib
from pathlib import Path

import npudure
import npudure_workshop

ROOT = Path(__file__).resolve().parents[2]


def test_the_workshop_has_the_runtimes_version() -> None:
    assert npudure_workshop.__version__ == npudure.__version__


def test_the_workshop_requires_the_runtime_of_its_own_version() -> None:
    project = tomllib.loads((ROOT / "workshop" / "pyproject.toml").read_text())["project"]
    runtime = [r for r in project["dependencies"] if r.split("=")[0].strip() == "npudure"]
    assert runtime == [f"npudure=={npudure.__version__}"]


def test_the_runtime_wheel_takes_only_the_runtime_package() -> None:
    """Not the glob `npudure*`, which would also take npudure_workshop."""
    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    assert find["include"] == ["npudure", "npudure.*"]
