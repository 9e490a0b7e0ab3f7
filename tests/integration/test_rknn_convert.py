"""The real conversion: rknn-toolkit2 (its own venv) builds INT8 .rknn for rk3576 and rk3588 from the
zoo ONNX, and its x86 simulator's 9 outputs, through npudure's post-processing, match the ONNX model.

Slow, so it runs once per session: the fixture calls the CLI once for both platforms, and the .rknn
files (with their .json and the simulator's outputs) are cached in $NPUDURE_CACHE/models keyed by the
ONNX sha256, the toolkit version, the calibration set and the check frames. CI cost on this 2-core VM:
~45 s to install the toolkit venv once (hash-locked, from the package index and the local torch file),
then ~15-25 s per platform to convert and simulate 4 frames; a warm cache re-checks in ~35 s.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers.rknn_toolkit import TOOLKIT_MARKS

from npudure.backends.base import sha256_file
from npudure.vision.postprocess import postprocess
from npudure_workshop.model import simcheck
from npudure_workshop.model.build import cache_dir, ensure_model
from npudure_workshop.model.convert import CHECK_FRAMES, check_set, meta_path, sim_path

pytestmark = TOOLKIT_MARKS
PLATFORMS = ("rk3576", "rk3588")


def _convert_cli(out_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "npudure", "model", "convert", "--out-dir", str(out_dir)],
        capture_output=True,
        text=True,
        timeout=1500,
    )


@pytest.fixture(scope="module")
def converted() -> dict:
    out_dir = cache_dir() / "rknn"
    first = _convert_cli(out_dir)
    second = _convert_cli(out_dir)  # same inputs: reuses both files
    onnx = ensure_model(layout="zoo").path
    return {"first": first, "second": second, "out_dir": out_dir, "onnx": onnx}


def test_both_platforms_convert_and_pass_the_simulator_check(converted) -> None:
    first = converted["first"]
    assert first.returncode == 0, first.stdout + first.stderr
    print(first.stdout)  # the match rates and per-output errors, for the record (pytest -s)
    for soc in PLATFORMS:
        assert f"target  {soc}, rknn-toolkit2 " in first.stdout
    assert first.stdout.count("check   PASSED") == 2
    assert sum(line.startswith("output  ") and "cosine" in line for line in first.stdout.splitlines()) == 18


def test_metadata_beside_each_model(converted) -> None:
    onnx: Path = converted["onnx"]
    for soc in PLATFORMS:
        rknn = converted["out_dir"] / f"{onnx.stem}-{soc}.rknn"
        meta = json.loads(meta_path(rknn).read_text())
        assert meta["target_platform"] == soc
        assert meta["toolkit"] == "rknn-toolkit2" and meta["toolkit_version"].count(".") >= 2
        assert meta["rknn_sha256"] == sha256_file(rknn)
        assert meta["onnx_sha256"] == sha256_file(onnx)
        assert rknn.read_bytes()[:4] == b"RKNN"  # the vendor's file magic


def test_second_run_reuses_the_files(converted) -> None:
    second = converted["second"]
    assert second.returncode == 0, second.stderr
    assert second.stdout.count("cached  ") == 2 and "converting" not in second.stderr
    assert second.stdout.count("check   PASSED") == 2


def _outputs(converted, soc: str) -> tuple[list, list, np.ndarray]:
    onnx: Path = converted["onnx"]
    frames = check_set(None, CHECK_FRAMES)
    rknn = converted["out_dir"] / f"{onnx.stem}-{soc}.rknn"
    return simcheck.onnx_outputs(onnx, frames), simcheck.load_sim_outputs(sim_path(rknn), len(frames)), frames


def test_a_permuted_output_fails_the_check(converted) -> None:
    ref, got, _ = _outputs(converted, "rk3576")
    assert simcheck.compare(ref, got).passed
    # Class maps read with H and W swapped: same shapes, wrong layout.
    swapped = [[o.transpose(0, 1, 3, 2) if o.shape[1] == 80 else o for o in f] for f in got]
    bad = simcheck.compare(ref, swapped)
    assert not bad.passed and bad.match_rate < simcheck.MIN_MATCH_RATE
    # Box sides in the wrong order (l,t,r,b -> r,b,l,t): boxes move, detections stop matching.
    sides = [
        [
            o.reshape(1, 4, 16, *o.shape[2:])[:, [2, 3, 0, 1]].reshape(o.shape) if o.shape[1] == 64 else o
            for o in f
        ]
        for f in got
    ]
    assert not simcheck.compare(ref, sides).passed
    # Outputs in another order: refused before any decoding.
    reordered = [[*f[3:6], *f[0:3], *f[6:]] for f in got]
    assert "output layout changed" in simcheck.compare(ref, reordered).problem


def test_rknn_detections_match_the_in_graph_decode(converted) -> None:
    """Ties our zoo post-processing to an independent decode: the split-layout model does the DFL and
    box arithmetic inside the ONNX graph. If postprocess.py's zoo decoding broke, this fails even though
    the ONNX-vs-RKNN comparison (same decoder on both sides) would not."""
    _, got, frames = _outputs(converted, "rk3576")
    split = simcheck.onnx_outputs(ensure_model(layout="split").path, frames)
    matched = total = 0
    for s, g in zip(split, got, strict=True):
        ds, dg = postprocess(s), postprocess(g)
        matched += simcheck.match_detections(ds, dg)
        total += len(ds) + len(dg)
    assert total > 0
    assert 2 * matched / total >= simcheck.MIN_MATCH_RATE
