"""Build, or reuse, the wheelhouse the boards install npudure from (they have no package index).

Run on the controller by the npudure_wheelhouse role; prints one JSON object on stdout:
``{"changed", "path", "wheel", "workshop_wheel", "workshop_extras", "wheels", "key", "actions"}``.

Two wheels are built from the repository: the runtime (npudure, every host) and, when an extra asked for
names it (``controller``: the scheduler host's default), the controller's workshop (npudure-workshop,
from workshop/). It is not on any index, so pip finds it beside npudure in the wheelhouse. A board
installs ``npudure[its backend]`` and never the workshop, whether or not its wheel is in the folder.

Two things decide whether work is needed, so a second run with the same inputs changes nothing:
- the dependency key (pyproject.toml, target platforms, extras, pip arguments) names the cache
  folder; a folder whose downloads completed is reused as is;
- a digest of the package sources decides whether the wheels are rebuilt. A rebuilt wheel keeps its
  version number, so the install side compares wheel hashes, not versions.

``--pin NAME==VERSION`` fixes a dependency's version (rknn-toolkit-lite2 must equal the boards' librknnrt
version), and ``--pin-hash NAME=sha256:HEX`` (repeatable: one per wheel file) locks it: every
downloaded wheel of NAME must hash to one of those, or the build fails and removes it.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path

# Bump when the folder layout or the download recipe changes: old caches are then ignored.
LAYOUT = 2
# Oldest glibc a manylinux wheel may target (manylinux2014 = glibc 2.17).
OLDEST_GLIBC_MINOR = 17
# Files outside the package that end up in the wheel's metadata.
PROJECT_FILES = ("pyproject.toml", "README.md", "LICENSE", "setup.cfg", "setup.py", "MANIFEST.in")
# The workshop's project folder in the repository, its package and its distribution.
WORKSHOP_DIR, WORKSHOP_PACKAGE, WORKSHOP = "workshop", "npudure_workshop", "npudure-workshop"
REQUIREMENT_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo")


def platform_tags(machine: str, glibc: str) -> list[str]:
    """Every manylinux tag a host with this CPU and glibc accepts, newest first.

    ``pip download --platform`` takes tags literally (it does not widen manylinux_2_36 to 2_17), so
    each compatible tag is listed.
    """
    major, _, minor = glibc.partition(".")
    if major != "2" or not minor.isdigit():
        raise ValueError(f"glibc {glibc!r} is not a 2.x glibc; only glibc-based Linux hosts are supported")
    tags = [f"manylinux_2_{m}_{machine}" for m in range(int(minor), OLDEST_GLIBC_MINOR - 1, -1)]
    return [*tags, f"manylinux2014_{machine}"]


def parse_target(text: str) -> tuple[str, str, str]:
    """``MACHINE:GLIBC:PYTHON`` (e.g. ``aarch64:2.36:3.11``) as given by the role's host probe."""
    parts = text.split(":")
    if len(parts) != 3 or not all(parts):
        raise ValueError(f"target {text!r} is not MACHINE:GLIBC:PYTHON, e.g. aarch64:2.36:3.11")
    machine, glibc, python = parts
    if not python.replace(".", "").isdigit() or python.count(".") != 1:
        raise ValueError(f"target {text!r}: Python version must look like 3.11")
    return machine, glibc, python


def workshop_extras(project: Path) -> list[str]:
    """The npudure extras that bring the workshop (pyproject.toml: ``controller = ["npudure-workshop"]``)."""
    project_table = tomllib.loads((project / "pyproject.toml").read_text())["project"]
    extras: dict[str, list[str]] = project_table.get("optional-dependencies", {})
    return sorted(
        extra
        for extra, requirements in extras.items()
        if any((m := REQUIREMENT_NAME.match(r)) and normalize(m[1]) == WORKSHOP for r in requirements)
    )


def _package_files(root: Path, package: str) -> list[Path]:
    files = [root / name for name in PROJECT_FILES if (root / name).is_file()]
    return files + sorted(
        p
        for p in (root / package).rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo")
    )


def source_digest(project: Path, workshop: bool = False) -> str:
    """Hash of everything that goes into the npudure wheel, and the workshop's too when it is built
    (paths and contents)."""
    digest = hashlib.sha256()
    files = _package_files(project, "npudure")
    if workshop:
        files += _package_files(project / WORKSHOP_DIR, WORKSHOP_PACKAGE)
    for path in files:
        digest.update(str(path.relative_to(project)).encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def dependency_key(
    project: Path,
    targets: list[str],
    extras: list[str],
    pip_args: list[str],
    pins: list[str] | None = None,
    pin_hashes: list[str] | None = None,
) -> str:
    recipe = {
        "layout": LAYOUT,
        "pyproject": (project / "pyproject.toml").read_text(),
        "targets": sorted(set(targets)),
        "extras": sorted(set(extras)),
        "pip_args": pip_args,
    }
    if pins or pin_hashes:  # only then, so existing caches keep their key
        recipe["pins"] = sorted(set(pins or []))
        recipe["pin_hashes"] = sorted(set(pin_hashes or []))
    if set(extras) & set(workshop_extras(project)):  # likewise: a board-only wheelhouse keeps its key
        recipe["workshop"] = (project / WORKSHOP_DIR / "pyproject.toml").read_text()
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]


def normalize(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(".", "-")


def parse_pin(text: str) -> tuple[str, str]:
    name, sep, version = text.partition("==")
    if not sep or not name.strip() or not version.strip() or any(c in version for c in "<>=!~,; "):
        raise ValueError(f"pin {text!r} is not NAME==VERSION, e.g. rknn-toolkit-lite2==2.5.0")
    return normalize(name), version.strip()


def parse_pin_hashes(items: list[str]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for text in items:
        name, sep, digest = text.partition("=")
        algo, _, hexdigest = digest.partition(":")
        if (
            not sep
            or algo != "sha256"
            or len(hexdigest) != 64
            or not all(c in "0123456789abcdef" for c in hexdigest)
        ):
            raise ValueError(f"pin hash {text!r} is not NAME=sha256:<64 lowercase hex digits>")
        out.setdefault(normalize(name), set()).add(hexdigest)
    return out


def check_pinned(wheels: Path, pins: dict[str, str], hashes: dict[str, set[str]]) -> None:
    """Every wheel of a pinned package has the pinned version and, when hashes are given, one of them."""
    for path in sorted(wheels.glob("*.whl")):
        name, version = normalize(path.name.split("-")[0]), path.name.split("-")[1]
        if name in pins and version != pins[name]:
            path.unlink()
            raise RuntimeError(f"{path.name}: {name} is pinned to {pins[name]}, pip fetched {version}")
        if name in hashes:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            if digest not in hashes[name]:
                path.unlink()
                raise RuntimeError(
                    f"{path.name} hashes to sha256:{digest}, which is not among the locked hashes of {name} "
                    "(npudure_wheelhouse_rknn_lite_hashes, npudure_wheelhouse_locked): a different file than "
                    "the one locked; removed it"
                )
    for name in hashes:
        if not any(normalize(p.name.split("-")[0]) == name for p in wheels.glob("*.whl")):
            raise RuntimeError(f"{name} is locked by hash but no wheel of it was downloaded")


# Zip timestamps of the npudure wheel (1980-01-01, the earliest a zip holds): with the file modes set
# below, the same source gives the same wheel, byte for byte, on any controller with the same build
# tools, so a second controller does not reinstall and restart the fleet.
SOURCE_DATE_EPOCH = "315532800"


def run(cmd: list[str], env: dict[str, str] | None = None) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-25:])
        raise RuntimeError(f"command failed ({done.returncode}): {' '.join(cmd)}\n{tail}")


def normalize_modes(root: Path) -> None:
    """0644 files, 0755 folders: the zip records each file's mode, which a clone's umask decides."""
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)


def build_npudure_wheel(python: str, project: Path, wheels: Path) -> str:
    """The runtime's wheel, npudure-VERSION-py3-none-any.whl."""
    return _build_wheel(python, project, "npudure", wheels)


def build_workshop_wheel(python: str, project: Path, wheels: Path) -> str:
    """The workshop's wheel, npudure_workshop-VERSION-py3-none-any.whl (from workshop/)."""
    return _build_wheel(python, project / WORKSHOP_DIR, WORKSHOP_PACKAGE, wheels)


def _build_wheel(python: str, project: Path, package: str, wheels: Path) -> str:
    """Build from a scratch copy: an in-tree build/ folder can leak deleted modules into the wheel."""
    with tempfile.TemporaryDirectory(prefix=f"{package}-wheel-") as scratch:
        src = Path(scratch, "src")
        src.mkdir()
        for name in PROJECT_FILES:
            if (project / name).is_file():
                shutil.copy2(project / name, src / name)  # follows a link (workshop/LICENSE)
        shutil.copytree(project / package, src / package, ignore=IGNORED)
        normalize_modes(src)
        out = Path(scratch, "out")
        env = {**os.environ, "SOURCE_DATE_EPOCH": SOURCE_DATE_EPOCH, "PYTHONHASHSEED": "0"}
        # No build isolation: the controller's setuptools builds it, no index needed for that step.
        cmd = [python, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(out), str(src)]
        run(cmd, env)
        # A wheel's file name spells the distribution with underscores: npudure_workshop-0.1.0-...
        built = sorted(out.glob(f"{package}-*.whl"))
        if len(built) != 1:
            raise RuntimeError(f"expected one {package} wheel from the build, found {built}")
        for old in wheels.glob(f"{package}-*.whl"):
            old.unlink()
        shutil.move(str(built[0]), wheels / built[0].name)
        return built[0].name


def download_dependencies(
    python: str,
    wheels: Path,
    wheel: str,
    targets: list[str],
    extras: list[str],
    pip_args: list[str],
    pins: dict[str, str] | None = None,
) -> None:
    requirement = str(wheels / wheel) + (f"[{','.join(sorted(set(extras)))}]" if extras else "")
    pinned = [f"{name}=={version}" for name, version in sorted((pins or {}).items())]
    for target in sorted(set(targets)):
        machine, glibc, version = parse_target(target)
        # --find-links: the workshop wheel built into this folder, which no index has.
        cmd = [python, "-m", "pip", "download", "-q", "--only-binary=:all:", "-d", str(wheels)]
        cmd += ["--find-links", str(wheels)]
        for tag in platform_tags(machine, glibc):
            cmd += ["--platform", tag]
        abi = "cp" + version.replace(".", "")
        cmd += ["--python-version", version, "--implementation", "cp", "--abi", abi, "--abi", "abi3"]
        cmd += ["--abi", "none", *pip_args, requirement, *pinned]
        run(cmd)


def write_manifest(wheels: Path) -> None:
    lines = [f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.name}" for p in sorted(wheels.glob("*.whl"))]
    (wheels / "MANIFEST.sha256").write_text("\n".join(lines) + "\n")


@contextlib.contextmanager
def locked(folder: Path) -> Iterator[None]:
    """Two playbook runs on one controller must not build into the same folder at once."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", required=True, type=Path, help="repository root (has pyproject.toml)")
    parser.add_argument(
        "--cache", type=Path, help="cache folder on the controller (required but for --workshop-wheel)"
    )
    parser.add_argument("--target", action="append", default=[], help="MACHINE:GLIBC:PYTHON, repeatable")
    parser.add_argument("--extra", action="append", default=[], help="npudure extra (onnx, rknn), repeatable")
    parser.add_argument("--pip-arg", action="append", default=[], help="extra argument for pip download")
    parser.add_argument("--pin", action="append", default=[], help="NAME==VERSION a dependency must have")
    parser.add_argument(
        "--pin-hash",
        action="append",
        default=[],
        help="NAME=sha256:HEX allowed for a pinned wheel, repeatable",
    )
    parser.add_argument("--check", action="store_true", help="report what would change, change nothing")
    parser.add_argument(
        "--workshop-wheel",
        type=Path,
        metavar="DIR",
        help="only build the workshop wheel into DIR (playbooks/benchmark.yml takes it to a board)",
    )
    args = parser.parse_args(argv)

    project, python = args.project.resolve(), sys.executable
    try:
        if not (project / "pyproject.toml").is_file():
            raise ValueError(f"{project} has no pyproject.toml; set npudure_wheelhouse_project_dir")
        if args.workshop_wheel:
            args.workshop_wheel.mkdir(parents=True, exist_ok=True)
            name = build_workshop_wheel(python, project, args.workshop_wheel)
            print(
                json.dumps(
                    {"changed": True, "path": str(args.workshop_wheel.resolve()), "workshop_wheel": name}
                )
            )
            return 0
        if args.cache is None:
            raise ValueError("no --cache given: the role passes npudure_wheelhouse_cache_dir")
        if not args.target:
            raise ValueError("no --target given: the role probes the hosts of the play for them")
        for target in args.target:
            machine, glibc, _ = parse_target(target)
            platform_tags(machine, glibc)
        pins = dict(parse_pin(p) for p in args.pin)
        pin_hashes = parse_pin_hashes(args.pin_hash)
        key = dependency_key(project, args.target, args.extra, args.pip_arg, args.pin, args.pin_hash)
        folder = args.cache.resolve() / key
        wheels = folder / "wheels"
        state_file = folder / "state.json"
        state = json.loads(state_file.read_text()) if state_file.is_file() else {}
        brings_workshop = workshop_extras(project)
        workshop = bool(set(args.extra) & set(brings_workshop))
        digest = source_digest(project, workshop)
        present = sorted(wheels.glob("npudure-*.whl")) if wheels.is_dir() else []
        present_workshop = sorted(wheels.glob(f"{WORKSHOP_PACKAGE}-*.whl")) if wheels.is_dir() else []
        actions = []
        if state.get("source") != digest or len(present) != 1 or len(present_workshop) != int(workshop):
            actions.append("build npudure and workshop wheels" if workshop else "build npudure wheel")
        if not state.get("dependencies_complete"):
            actions.append("download dependencies")
        if actions and not args.check:
            with locked(folder):
                wheels.mkdir(exist_ok=True)
                wheel = build_npudure_wheel(python, project, wheels)
                if workshop:
                    build_workshop_wheel(python, project, wheels)
                state["source"] = digest
                state_file.write_text(json.dumps(state))
                if not state.get("dependencies_complete"):
                    download_dependencies(python, wheels, wheel, args.target, args.extra, args.pip_arg, pins)
                    check_pinned(wheels, pins, pin_hashes)
                    state["dependencies_complete"] = True
                write_manifest(wheels)
                state_file.write_text(json.dumps(state))
        present = sorted(wheels.glob("npudure-*.whl")) if wheels.is_dir() else []
        present_workshop = sorted(wheels.glob(f"{WORKSHOP_PACKAGE}-*.whl")) if wheels.is_dir() else []
    except (ValueError, RuntimeError, OSError, KeyError, tomllib.TOMLDecodeError) as exc:
        print(json.dumps({"failed": True, "changed": False, "msg": str(exc)}))
        return 1
    result = {
        "changed": bool(actions),
        "actions": actions,
        "key": key,
        "path": str(wheels),
        "ready": bool(present) and state.get("dependencies_complete", False),
        "wheel": present[0].name if present else "",
        "workshop_wheel": present_workshop[0].name if present_workshop else "",
        "workshop_extras": brings_workshop,
        "wheels": sorted(p.name for p in wheels.glob("*.whl")) if wheels.is_dir() else [],
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
