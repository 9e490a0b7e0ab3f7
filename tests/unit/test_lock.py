"""The two locks match pyproject.toml: requirements/controller.lock (issue #49), the controller's and CI's
environment, and requirements/fleet.lock (issue #45), what the boards and the scheduler host install from
the wheelhouse. Both are installed with --require-hashes, so a dependency added to pyproject.toml and not
locked, or a lock left behind a changed range, must fail here and not on a fresh machine or a board."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
# Each lock and the extras it covers: what scripts/bootstrap.sh installs; what a fleet host may install.
LOCKS = {"controller.lock": ("dev", "onnx", "controller"), "fleet.lock": ("onnx", "rknn", "controller")}
each_lock = pytest.mark.parametrize("lock", sorted(LOCKS))
PIN = re.compile(r"^([A-Za-z0-9_.\-\[\]]+)==([^\s;\\]+)")


def _lock(lock: str) -> dict[str, list[tuple[Version, int]]]:
    """name -> [(version, hashes)] (a universal lock may pin a name twice, per Python version)."""
    pins: dict[str, list[tuple[Version, int]]] = {}
    current: list[tuple[Version, int]] | None = None
    for line in (ROOT / "requirements" / lock).read_text().splitlines():
        if match := PIN.match(line):
            current = pins.setdefault(canonicalize_name(match[1].split("[")[0]), [])
            current.append((Version(match[2]), 0))
        elif "--hash=sha256:" in line and current:
            version, hashes = current[-1]
            current[-1] = (version, hashes + 1)
    return pins


WINGS = ("npudure", "npudure-workshop")  # this checkout's two projects: installed editable, never locked


def _workshop() -> list[Requirement]:
    project = tomllib.loads((ROOT / "workshop" / "pyproject.toml").read_text())["project"]
    return [Requirement(r) for r in project["dependencies"]]


def _declared(lock: str) -> list[Requirement]:
    """The runtime's dependencies and the lock's extras, with the workshop (the controller extra) replaced
    by its own dependencies: what is installed from the lock."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    declared = [Requirement(r) for r in project["dependencies"]]
    declared += [Requirement(r) for extra in LOCKS[lock] for r in extras[extra]] + _workshop()
    return [r for r in declared if canonicalize_name(r.name) not in WINGS]


@each_lock
def test_the_controller_extra_brings_the_workshop_and_the_lock_neither_wing(lock: str) -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras["controller"] == ["npudure-workshop"]
    assert {"matplotlib", "rich"} <= {canonicalize_name(r.name) for r in _workshop()}
    assert not set(WINGS) & set(_lock(lock)), "the lock pins npudure or npudure-workshop: see scripts/lock.sh"


@each_lock
def test_every_declared_dependency_is_locked_within_its_range(lock: str) -> None:
    pins = _lock(lock)
    for req in _declared(lock):
        versions = pins.get(canonicalize_name(req.name))
        assert versions, f"{req.name} is in pyproject.toml but not in the lock: run `make lock`"
        for version, _ in versions:
            assert req.specifier.contains(version, prereleases=True), (
                f"the lock pins {req.name}=={version}, outside pyproject.toml's {req}: run `make lock`"
            )


@each_lock
def test_every_locked_package_has_hashes(lock: str) -> None:
    pins = _lock(lock)
    assert len(pins) > 50  # the lock was read, not an empty or renamed file
    for name, versions in pins.items():
        for version, hashes in versions:
            assert hashes >= 1, f"{name}=={version} has no --hash in the lock"


def test_the_build_backend_is_locked_for_the_no_isolation_install() -> None:
    pins = _lock("controller.lock")
    assert "setuptools" in pins and "wheel" in pins
    floor = Requirement(tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"][0])
    assert all(floor.specifier.contains(v) for v, _ in pins["setuptools"])


def test_the_build_requirements_are_said_once() -> None:
    """requirements/build.in locks what [build-system] requires: the same requirements, floors included
    (setuptools 77: the first to take an SPDX string as the license, PEP 639)."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    build_in = [
        line.strip()
        for line in (ROOT / "requirements" / "build.in").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert build_in == pyproject["build-system"]["requires"]
    assert Requirement(build_in[0]).specifier.contains("77.0.0")
    assert not Requirement(build_in[0]).specifier.contains("76.1.0")


def test_the_license_file_is_the_license_the_metadata_names() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text


def test_the_bench_extra_is_the_controller_extra() -> None:
    """`bench` is kept as an alias of `controller` (inventories name it): the same requirements."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert sorted(extras["bench"]) == sorted(extras["controller"])


def test_the_fleet_lock_is_the_fleets_extras_without_the_tools() -> None:
    """fleet.in names the extras the lock is checked against, and nothing of dev reaches a board."""
    fleet_in = (ROOT / "requirements" / "fleet.in").read_text()
    named = {e for line in re.findall(r"^-e \.\[([a-z,]+)\]", fleet_in, re.M) for e in line.split(",")}
    assert named == set(LOCKS["fleet.lock"])
    pins = _lock("fleet.lock")
    assert not {"pytest", "ruff", "mypy", "ansible-core", "uv"} & set(pins)
    assert "rknn-toolkit-lite2" in pins and "onnxruntime" in pins
