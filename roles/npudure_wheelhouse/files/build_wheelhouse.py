"""Build, or reuse, the wheelhouse the boards install npudure from (they have no package index).

Run on the controller by the npudure_wheelhouse role; prints one JSON object on stdout:
``{"changed", "path", "wheel", "workshop_wheel", "workshop_extras", "wheels", "requirements", "key",
"actions"}``.

Two wheels are built from the repository: the runtime (npudure, every host) and, when an extra asked for
names it (``controller``: the scheduler host's default), the controller's workshop (npudure-workshop,
from workshop/). It is not on any index, so pip finds it beside npudure in the wheelhouse. A board
installs ``npudure[its backend]`` and never the workshop, whether or not its wheel is in the folder.

Two things decide whether work is needed, so a second run with the same inputs changes nothing:
- the dependency key (pyproject.toml, target platforms, extras, pip arguments) names the cache
  folder; a folder whose downloads completed is reused as is;
- a digest of the package sources decides whether the wheels are rebuilt. A rebuilt wheel keeps its
  version number, so the install side compares wheel hashes, not versions.

Every dependency comes from the fleet's lock (requirements/fleet.lock, ``make lock``): pip downloads
only its versions, every downloaded wheel must hash to one of its hashes (or the build fails and removes
it), and for each set of extras a host installs (``--install-set EXTRAS@TARGET``) the wheelhouse gets a
``requirements-EXTRAS.txt``: the set's dependencies, with the lock's markers and hashes, that hosts
install with ``pip --require-hashes``. ``--pin NAME==VERSION`` overrides the lock's version of one
package (rknn-toolkit-lite2 must equal the boards' librknnrt version); a version the lock does not hold
needs its hashes (``--pin-hash NAME=sha256:HEX``, one per wheel file).
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
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name, parse_wheel_filename

# Bump when the folder layout or the download recipe changes: old caches are then ignored.
LAYOUT = 3
# The fleet's lock, relative to the project (scripts/lock.sh writes it from requirements/fleet.in).
LOCK_FILE = "requirements/fleet.lock"
# Oldest glibc a manylinux wheel may target (manylinux2014 = glibc 2.17).
OLDEST_GLIBC_MINOR = 17
# Files outside the package that end up in the wheel's metadata.
PROJECT_FILES = ("pyproject.toml", "README.md", "LICENSE", "setup.cfg", "setup.py", "MANIFEST.in")
# The workshop's project folder in the repository, its package and its distribution.
WORKSHOP_DIR, WORKSHOP_PACKAGE, WORKSHOP = "workshop", "npudure_workshop", "npudure-workshop"
# This repository's own distributions: built here, installed by hash of the built file, never from the lock.
OWN = frozenset({"npudure", WORKSHOP})
REQUIREMENT_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
# One entry of a uv/pip-compile lock, its continuation lines joined: NAME==VERSION [; MARKER] --hash=...
LOCK_ENTRY = re.compile(
    r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;]+)\s*(?:;\s*(?P<marker>.*?))?\s*"
    r"(?P<hashes>(?:--hash=sha256:[0-9a-f]{64}\s*)+)$"
)
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
    install_sets: list[str] | None = None,
) -> str:
    recipe = {
        "layout": LAYOUT,
        "pyproject": (project / "pyproject.toml").read_text(),
        "lock": (project / LOCK_FILE).read_text() if (project / LOCK_FILE).is_file() else "",
        "targets": sorted(set(targets)),
        "extras": sorted(set(extras)),
        "install_sets": sorted(set(install_sets or [])),
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


@dataclass(frozen=True)
class Locked:
    """One pinned package of the lock: its version, the environments it is for, its files' sha256."""

    name: str
    version: str
    marker: str
    hashes: frozenset[str]

    def line(self, hashes: Iterable[str] | None = None) -> str:
        """The entry as a requirements line for ``pip --require-hashes``."""
        marker = f" ; {self.marker}" if self.marker else ""
        digests = sorted(hashes if hashes is not None else self.hashes)
        return f"{self.name}=={self.version}{marker} " + " ".join(f"--hash=sha256:{d}" for d in digests)


def parse_lock(text: str, source: str = LOCK_FILE) -> list[Locked]:
    """The entries of a hashed lock (``uv pip compile --generate-hashes``); comments and options skipped."""
    logical, current = [], ""
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if not line:
            continue
        current += " " + line.removesuffix("\\").strip()
        if not line.endswith("\\"):
            logical.append(current.strip())
            current = ""
    if current.strip():
        logical.append(current.strip())
    entries = []
    for line in logical:
        if line.startswith("-"):  # an option line (--index-url ...)
            continue
        match = LOCK_ENTRY.match(line)
        if not match:
            raise ValueError(
                f"{source}: {line[:80]!r} is not NAME==VERSION with its --hash=sha256 lines; "
                "regenerate it with `make lock`"
            )
        hashes = frozenset(h.removeprefix("--hash=sha256:") for h in match["hashes"].split())
        entries.append(Locked(normalize(match["name"]), match["version"], match["marker"] or "", hashes))
    if not entries:
        raise ValueError(f"{source} locks no package; regenerate it with `make lock`")
    return entries


def effective_lock(
    entries: list[Locked], pins: dict[str, str], pin_hashes: dict[str, set[str]]
) -> list[Locked]:
    """The lock with each pin in place of the lock's versions of that package. A pin the lock holds keeps
    the lock's hashes (narrowed to the pin's, when given); another version must bring its own hashes."""
    out = [e for e in entries if e.name not in pins]
    for name, version in sorted(pins.items()):
        held = [e for e in entries if e.name == name and e.version == version]
        given = frozenset(pin_hashes.get(name, ()))
        if held:
            hashes = (held[0].hashes & given) if given else held[0].hashes
            if not hashes:
                raise ValueError(f"{name} {version}: none of the given hashes is among the lock's for it")
            out.append(Locked(name, version, held[0].marker, hashes))
        elif given:
            out.append(Locked(name, version, "", given))
        else:
            locked = sorted(e.version for e in entries if e.name == name) or ["none"]
            raise ValueError(
                f"{name} is pinned to {version}, which {LOCK_FILE} does not hold (it locks "
                f"{', '.join(locked)}) and no hashes were given for it: add the sha256 of its wheels "
                f"(npudure_wheelhouse_rknn_lite_hashes for rknn-toolkit-lite2), or pin {locked[0]}"
            )
    return out


def write_constraints(path: Path, entries: list[Locked]) -> None:
    """The lock's versions and markers, without hashes (pip ignores or refuses hashes in constraints)."""
    lines = [f"{e.name}=={e.version}" + (f" ; {e.marker}" if e.marker else "") for e in entries]
    path.write_text("\n".join(lines) + "\n")


def check_locked(wheels: Path, entries: list[Locked]) -> None:
    """Every downloaded wheel (but this repository's own) is a version the lock holds, with one of its
    hashes; a wheel that is not is removed, so a host can never install it."""
    allowed: dict[tuple[str, str], set[str]] = {}
    for e in entries:
        allowed.setdefault((e.name, e.version), set()).update(e.hashes)
    for path in sorted(wheels.glob("*.whl")):
        name, version, _, _ = parse_wheel_filename(path.name)
        name = canonicalize_name(name)
        if name in OWN:
            continue
        digests = allowed.get((name, str(version)))
        if digests is None:
            path.unlink()
            raise RuntimeError(
                f"{path.name}: {name} {version} is not in {LOCK_FILE}; removed it. A dependency changed: "
                "run `make lock` and commit the lock"
            )
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if digest not in digests:
            path.unlink()
            raise RuntimeError(
                f"{path.name} hashes to sha256:{digest}, which is not among the locked hashes of {name} "
                f"{version} ({LOCK_FILE}, npudure_wheelhouse_rknn_lite_hashes): a different file than the "
                "one locked; removed it"
            )


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


def target_args(target: str) -> list[str]:
    """pip's options for another machine's wheels: its platform tags, Python version and ABIs."""
    machine, glibc, version = parse_target(target)
    args = ["--only-binary=:all:"]
    for tag in platform_tags(machine, glibc):
        args += ["--platform", tag]
    abi = "cp" + version.replace(".", "")
    return [
        *args,
        "--python-version",
        version,
        "--implementation",
        "cp",
        "--abi",
        abi,
        "--abi",
        "abi3",
        "--abi",
        "none",
    ]


def with_extras(path: Path, extras: Iterable[str]) -> str:
    names = sorted({e for e in extras if e})
    return str(path) + (f"[{','.join(names)}]" if names else "")


def download_dependencies(
    python: str,
    wheels: Path,
    wheel: str,
    targets: list[str],
    extras: list[str],
    pip_args: list[str],
    constraints: Path,
) -> None:
    """Every target's wheels of npudure[extras], at the versions of the lock (``constraints``)."""
    for target in sorted(set(targets)):
        # --find-links: the workshop wheel built into this folder, which no index has.
        cmd = [python, "-m", "pip", "download", "-q", "-d", str(wheels), "--find-links", str(wheels)]
        cmd += [*target_args(target), "-c", str(constraints), *pip_args, with_extras(wheels / wheel, extras)]
        run(cmd)


def parse_install_set(text: str) -> tuple[str, str]:
    """``EXTRAS@TARGET`` (``rknn@aarch64:2.36:3.11``, ``@TARGET`` for none): what a kind of host installs."""
    extras, sep, target = text.rpartition("@")
    if not sep:
        raise ValueError(
            f"install set {text!r} is not EXTRAS@MACHINE:GLIBC:PYTHON, e.g. rknn@aarch64:2.36:3.11"
        )
    parse_target(target)
    return ",".join(sorted({e.strip() for e in extras.split(",") if e.strip()})), target


def requirements_name(extras: str) -> str:
    """The file a host with these extras installs from (npudure_common names it the same way)."""
    return f"requirements-{extras.replace(',', '+') or 'base'}.txt"


def install_closure(
    python: str, wheels: Path, wheel: str, extras: str, target: str, constraints: Path
) -> set[tuple[str, str]]:
    """The (name, version) pairs pip installs for npudure[extras] on ``target``, resolved offline from the
    wheelhouse (a dry run: nothing is installed)."""
    with tempfile.TemporaryDirectory(prefix="npudure-closure-") as scratch:
        report = Path(scratch, "report.json")
        cmd = [
            python,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--ignore-installed",
            "-q",
            "--report",
            str(report),
        ]
        cmd += ["--disable-pip-version-check", "--no-index", "--find-links", str(wheels)]
        cmd += [*target_args(target), "--target", str(Path(scratch, "target")), "-c", str(constraints)]
        run([*cmd, with_extras(wheels / wheel, extras.split(","))])
        installed = json.loads(report.read_text())["install"]
    return {(canonicalize_name(i["metadata"]["name"]), i["metadata"]["version"]) for i in installed}


def write_requirements(
    wheels: Path, extras: str, closure: set[tuple[str, str]], entries: list[Locked]
) -> str:
    """requirements-EXTRAS.txt: the lock's entries of the closure (this repository's own wheels apart,
    installed by the role by their own hash), with the lock's markers and hashes."""
    wanted = {pair for pair in closure if pair[0] not in OWN}
    chosen = [e for e in entries if (e.name, e.version) in wanted]
    missing = wanted - {(e.name, e.version) for e in chosen}
    if missing:
        raise RuntimeError(
            f"npudure[{extras}] needs {sorted(missing)}, which {LOCK_FILE} does not hold: run `make lock`"
        )
    name = requirements_name(extras)
    project = with_extras(Path("npudure"), extras.split(","))
    header = f"# {project}'s dependencies from {LOCK_FILE}: pip install --require-hashes -r {name}\n"
    body = "\n".join(e.line() for e in sorted(chosen, key=lambda e: (e.name, e.version)))
    (wheels / name).write_text(header + body + "\n")
    return name


def write_manifest(wheels: Path) -> None:
    files = sorted([*wheels.glob("*.whl"), *wheels.glob("requirements-*.txt")])
    lines = [f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.name}" for p in files]
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
    repeatable = {  # option: (metavar, help); each may be given several times
        "--target": ("MACHINE:GLIBC:PYTHON", "a host platform, e.g. aarch64:2.36:3.11"),
        "--extra": ("EXTRA", "an npudure extra to download for (onnx, rknn, controller)"),
        "--install-set": (
            "EXTRAS@TARGET",
            "what one kind of host installs, on its target (rknn@aarch64:2.36:3.11)",
        ),
        "--pip-arg": ("ARG", "an extra argument for pip download"),
        "--pin": ("NAME==VERSION", "a version in place of the lock's"),
        "--pin-hash": ("NAME=sha256:HEX", "a hash of a pinned version the lock does not hold"),
    }
    for option, (metavar, text) in repeatable.items():
        parser.add_argument(option, action="append", default=[], metavar=metavar, help=text + ", repeatable")
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
        install_sets = [parse_install_set(text) for text in args.install_set]
        pins = dict(parse_pin(p) for p in args.pin)
        pin_hashes = parse_pin_hashes(args.pin_hash)
        lock_path = project / LOCK_FILE
        if not lock_path.is_file():
            raise ValueError(
                f"{project} has no {LOCK_FILE}: the checkout is incomplete (`make lock` writes it)"
            )
        entries = effective_lock(parse_lock(lock_path.read_text()), pins, pin_hashes)
        key = dependency_key(
            project, args.target, args.extra, args.pip_arg, args.pin, args.pin_hash, args.install_set
        )
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
                    constraints = folder / "constraints.txt"
                    write_constraints(constraints, entries)
                    download_dependencies(
                        python, wheels, wheel, args.target, args.extra, args.pip_arg, constraints
                    )
                    check_locked(wheels, entries)
                    for old in wheels.glob("requirements-*.txt"):
                        old.unlink()
                    closures: dict[str, set[tuple[str, str]]] = {}
                    for extras, target in install_sets:
                        closure = install_closure(python, wheels, wheel, extras, target, constraints)
                        closures.setdefault(extras, set()).update(closure)
                    for extras, closure in sorted(closures.items()):
                        write_requirements(wheels, extras, closure, entries)
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
        "requirements": sorted(p.name for p in wheels.glob("requirements-*.txt")) if wheels.is_dir() else [],
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
