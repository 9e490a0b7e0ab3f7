"""The vendor's x86 converter rknn-toolkit2, in a virtualenv of its own.

Its declared pins (torch<=2.4, numpy<=1.26, onnx<=1.18) clash with npudure's, so it never shares our
environment: this module creates ``~/.cache/npudure/rknn-toolkit2-venv`` (or ``$NPUDURE_RKNN_TOOLKIT_VENV``)
from the hash-locked ``rknn-toolkit2-requirements.txt`` beside it, and runs ``rknn_worker.py`` inside
it as a subprocess (JSON request on stdin, JSON result in a file; the toolkit prints freely).
A stamp holding the lock's sha256 makes a second call reuse the venv, and a changed lock rebuild it.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REQUIREMENTS = HERE / "rknn-toolkit2-requirements.txt"
WORKER = HERE / "rknn_worker.py"
VENV_ENV = "NPUDURE_RKNN_TOOLKIT_VENV"
REQUIREMENTS_ENV = "NPUDURE_RKNN_TOOLKIT_REQUIREMENTS"
PYTHON_ENV = "NPUDURE_RKNN_TOOLKIT_PYTHON"
STAMP = ".npudure-toolkit.json"
# The lock is resolved for this interpreter line (the vendor ships one wheel per CPython version).
PYTHON_VERSION = (3, 11)
INSTALL_TIMEOUT_S = 1800

Log = Callable[[str], None]


class ToolkitError(Exception):
    """rknn-toolkit2 cannot be installed or run; the message says why and what to do."""


@dataclass(frozen=True)
class Toolkit:
    venv: Path
    python: Path
    version: str  # rknn-toolkit2's version, as installed


def default_venv() -> Path:
    env = os.environ.get(VENV_ENV)
    if env:
        return Path(env)
    root = os.environ.get("NPUDURE_CACHE")
    return (Path(root) if root else Path.home() / ".cache" / "npudure") / "rknn-toolkit2-venv"


def requirements_file() -> Path:
    return Path(os.environ.get(REQUIREMENTS_ENV) or REQUIREMENTS)


def pinned_version(requirements: Path | None = None) -> str | None:
    """The rknn-toolkit2 version the lock pins (the runtime on the boards must match it)."""
    for line in (requirements or requirements_file()).read_text().splitlines():
        name, _, rest = line.partition("==")
        if name.strip().lower().replace("_", "-") == "rknn-toolkit2" and rest:
            return rest.split()[0]
    return None


def _base_python() -> str:
    """A CPython 3.11 to create the venv with: ours if it is 3.11, else python3.11 on PATH."""
    if os.environ.get(PYTHON_ENV):
        return os.environ[PYTHON_ENV]
    if sys.version_info[:2] == PYTHON_VERSION:
        return getattr(sys, "_base_executable", None) or sys.executable
    found = shutil.which(f"python{PYTHON_VERSION[0]}.{PYTHON_VERSION[1]}")
    if found:
        return found
    raise ToolkitError(
        f"rknn-toolkit2's lock is for CPython {PYTHON_VERSION[0]}.{PYTHON_VERSION[1]}, and none was found "
        f"(this is {platform.python_version()}): install python3.11 or set {PYTHON_ENV}"
    )


def _check_host() -> None:
    if sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64"):
        raise ToolkitError(
            f"rknn-toolkit2 runs on x86_64 Linux only (this is {sys.platform} {platform.machine()}): "
            "convert on an x86 machine and copy the .rknn file"
        )


def _read_stamp(venv: Path) -> dict:
    try:
        return json.loads((venv / STAMP).read_text())
    except (OSError, ValueError):
        return {}


def ensure_toolkit(venv: Path | None = None, *, log: Log = print) -> Toolkit:
    """The toolkit's venv, created and installed from the lock when missing or stale."""
    _check_host()
    venv = venv or default_venv()
    requirements = requirements_file()
    if not requirements.is_file():
        raise ToolkitError(f"{requirements}: no such requirements file ({REQUIREMENTS_ENV})")
    lock_sha = hashlib.sha256(requirements.read_bytes()).hexdigest()
    python = venv / "bin" / "python"
    stamp = _read_stamp(venv)
    if stamp.get("requirements_sha256") == lock_sha and python.exists():
        return Toolkit(venv, python, stamp.get("version", "unknown"))

    base = _base_python()
    log(f"installing rknn-toolkit2 into {venv} (its own virtualenv; once, ~1-3 min)")
    started = time.monotonic()
    if venv.exists():
        shutil.rmtree(venv)
    venv.parent.mkdir(parents=True, exist_ok=True)
    # The stamp is written last: a half-installed venv has none and is rebuilt next time.
    try:
        _run([base, "-m", "venv", str(venv)], "creating the toolkit's virtualenv")
        _run(
            [
                str(python),
                "-m",
                "pip",
                "install",
                "-q",
                "--disable-pip-version-check",
                "--no-deps",
                "--require-hashes",
                "--only-binary=:all:",
                "-r",
                str(requirements),
            ],
            "installing rknn-toolkit2 from " + str(requirements),
        )
    except BaseException:
        shutil.rmtree(venv, ignore_errors=True)
        raise
    version = _installed_version(python)
    (venv / STAMP).write_text(json.dumps({"requirements_sha256": lock_sha, "version": version}) + "\n")
    log(f"rknn-toolkit2 {version} ready in {time.monotonic() - started:.0f} s")
    return Toolkit(venv, python, version)


def _installed_version(python: Path) -> str:
    code = "import importlib.metadata as m; print(m.version('rknn-toolkit2'))"
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        raise ToolkitError(
            f"rknn-toolkit2 did not install into {python.parent.parent}: {done.stderr.strip()}"
        )
    return done.stdout.strip()


def _run(cmd: list[str], what: str) -> None:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolkitError(f"{what}: {exc}; rknn-toolkit2 could not be installed") from None
    if done.returncode != 0:
        tail = [
            line
            for line in (done.stderr or done.stdout).strip().splitlines()
            if line.strip() and not line.startswith("WARNING: Location")
        ][-3:]
        raise ToolkitError(
            f"{what} failed ({'; '.join(tail) or f'exit {done.returncode}'}). rknn-toolkit2 could not be "
            f"installed: check that pip reaches a package index, or set {VENV_ENV} to a venv that has it"
        )


def run_worker(toolkit: Toolkit, request: dict, log_file: Path, timeout: float = 1800) -> dict:
    """Run ``rknn_worker.py`` in the toolkit's venv; its log goes to ``log_file``."""
    with tempfile.TemporaryDirectory(prefix="npudure-rknn-") as tmp:
        result_file = Path(tmp) / "result.json"
        request = {**request, "result": str(result_file)}
        with open(log_file, "w") as log:
            try:
                done = subprocess.run(
                    [str(toolkit.python), str(WORKER)],
                    input=json.dumps(request),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    text=True,
                    timeout=timeout,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                raise ToolkitError(
                    f"rknn-toolkit2 did not finish within {timeout:.0f} s; log: {log_file}"
                ) from None
        try:
            result = json.loads(result_file.read_text())
        except (OSError, ValueError):
            result = {"ok": False, "error": f"the converter exited {done.returncode} without a result"}
    if not result.get("ok"):
        raise ToolkitError(f"{result.get('error', 'rknn-toolkit2 failed')}; log: {log_file}")
    return result


__all__ = [
    "Toolkit",
    "ToolkitError",
    "default_venv",
    "ensure_toolkit",
    "pinned_version",
    "requirements_file",
    "run_worker",
]
