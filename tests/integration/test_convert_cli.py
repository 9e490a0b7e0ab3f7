"""``npudure model convert`` refuses bad input with one line and a distinct exit code (no toolkit run)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from npudure_workshop.model.build import ensure_model


def convert(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "npudure", "model", "convert", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def one_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def test_missing_onnx(tmp_path: Path) -> None:
    proc = convert(str(tmp_path / "nope.onnx"))
    assert proc.returncode == 66
    assert "nope.onnx: no such ONNX file" in one_line(proc) and "--layout zoo" in proc.stderr


def test_wrong_layout_is_refused(model_cache: Path) -> None:
    split = ensure_model(layout="split").path
    proc = convert(str(split), "--platform", "rk3576")
    assert proc.returncode == 65
    line = one_line(proc)
    assert "'split' layout (2 outputs)" in line and "--layout zoo" in line


def test_not_an_onnx_file(tmp_path: Path) -> None:
    bogus = tmp_path / "model.onnx"
    bogus.write_bytes(b"not a protobuf at all \xff\xff")
    proc = convert(str(bogus))
    assert proc.returncode == 65
    assert "not a readable ONNX model" in one_line(proc)


def test_unknown_platform(model_cache: Path) -> None:
    zoo = ensure_model(layout="zoo").path
    proc = convert(str(zoo), "--platform", "rk3399")
    assert proc.returncode == 64
    assert "unknown platform 'rk3399'; use one of: rk3576, rk3588" in one_line(proc)


def test_empty_images_folder(model_cache: Path, tmp_path: Path) -> None:
    zoo = ensure_model(layout="zoo").path
    (tmp_path / "imgs").mkdir()
    proc = convert(str(zoo), "--images", str(tmp_path / "imgs"))
    assert proc.returncode == 66
    assert "no jpg/jpeg/png/bmp files in it" in one_line(proc)


@pytest.mark.skipif(sys.platform != "linux", reason="the converter is for x86_64 Linux")
def test_toolkit_not_installable(model_cache: Path, tmp_path: Path) -> None:
    """A base interpreter that cannot make the venv stands for any install failure (no network used)."""
    zoo = ensure_model(layout="zoo").path
    venv = tmp_path / "toolkit-venv"
    proc = convert(
        str(zoo),
        "--platform",
        "rk3576",
        "--calib-count",
        "1",
        "--check-frames",
        "0",
        env={
            "NPUDURE_RKNN_TOOLKIT_VENV": str(venv),
            "NPUDURE_RKNN_TOOLKIT_PYTHON": str(tmp_path / "no-python"),
        },
    )
    assert proc.returncode == 69, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("npudure model convert:")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr
    assert "creating the toolkit's virtualenv" in errors[0] and "could not be installed" in errors[0]
    assert not venv.exists()  # nothing half-made is left to be reused
