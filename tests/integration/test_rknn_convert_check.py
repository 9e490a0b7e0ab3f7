"""Issue #44 end to end with the vendor's toolkit: a standard export with a small class count (2
classes, 'Normal' and 'Fall', 640x640, one output (1, 6, 8400), names in its metadata) converts with
exit 0 when its detections agree, judged on 50 frames with an interval; the same model with a class
branch INT8 cannot hold (tests/helpers/broken_model.py) fails with exit 1 and one line naming the
spoiled output and the next step; and with --images the check runs on exactly those images.

The model is npudure's own UNTRAINED YOLOv8n built at nc=2 (`npudure model build --layout standard
--classes 2 --names Normal,Fall`): the check measures conversion fidelity, not accuracy. Slow: three
conversions for rk3588 (~15-50 s each here), the .rknn files cached as in test_rknn_convert.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers.broken_model import corrupt_score_branch
from helpers.rknn_toolkit import TOOLKIT_MARKS
from PIL import Image

from npudure_workshop.model.build import cache_dir, ensure_model
from npudure_workshop.model.convert import check_set

pytestmark = TOOLKIT_MARKS
NAMES = ("Normal", "Fall")
SOC = "rk3588"


def _convert(onnx: Path, *extra: str, out_dir: Path | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "npudure", "model", "convert", "--platform", SOC, *extra]
    cmd += ["--out-dir", str(out_dir or cache_dir() / "rknn"), str(onnx)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=1500)


@pytest.fixture(scope="module")
def fall() -> Path:
    return ensure_model("standard", nc=2, size=640, names=NAMES).path


def test_a_small_class_count_export_converts_when_its_detections_agree(fall: Path) -> None:
    proc = _convert(fall)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    print(proc.stdout)  # for the record (pytest -s)
    lines = proc.stdout.splitlines()
    assert any(line.startswith("frames  50 generic photographs") for line in lines)
    check = next(line for line in lines if line.startswith("check   50 frames"))
    assert "(95% interval over frames " in check
    assert [line.split(":")[0] for line in lines if line.startswith("class   ")] == [
        "class   0 'Normal'",
        "class   1 'Fall'",
    ]
    outputs = [line for line in lines if line.startswith("output  ")]
    assert len(outputs) == 6 and not any("score sum" in line for line in outputs)  # ADR 19
    assert "check   PASSED" in proc.stdout and "next    " not in proc.stdout


def test_a_corrupted_score_branch_fails_and_names_the_next_step(fall: Path) -> None:
    broken = corrupt_score_branch(fall, cache_dir() / "fall-broken-cls16.onnx")
    proc = _convert(broken)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    print(proc.stdout)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("npudure model convert:")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "the simulator check failed: rk3588: " in errors[0]
    assert "INT8 spoils output 3 cls_s16 (class scores, stride 16)" in errors[0]
    assert "next: keep the layers feeding cls_s16 out of INT8" in errors[0] and "--images DIR" in errors[0]
    assert "check   FAILED" in proc.stdout


def test_with_images_the_check_runs_on_the_users_frames(fall: Path, tmp_path: Path) -> None:
    folder = tmp_path / "scenes"
    folder.mkdir()
    for i, frame in enumerate(check_set(None, 12, 640)):
        Image.fromarray(frame).save(folder / f"cam-{i:03d}.png")
    proc = _convert(fall, "--images", str(folder), "--calib-count", "12", out_dir=tmp_path / "out")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"frames  12 of your images (--images {folder})" in proc.stdout
    assert "check   12 frames" in proc.stdout and "only 12 frames (fewer than 50)" in proc.stdout
    assert "calibrated on generic photographs" not in proc.stdout
