"""A standard ultralytics-layout export (one output (1, 4+nc, N), names in its metadata) of a 2-class
320x320 model, and of a 1-class 640x640 one, goes through `npudure model convert`: its head is
rewritten on the graph into the zoo layout, rknn-toolkit2 (its own venv) builds INT8 .rknn, and the
simulator's outputs pass the check; the class count, names and input size land in the .rknn.json,
where the rknn backend reads them.

Slow (the vendor toolkit; the venv and the .rknn are cached as for test_rknn_convert.py). The model is
npudure's own UNTRAINED YOLOv8n built at nc=2 / 320: the check measures conversion fidelity, not
accuracy.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.rknn_toolkit import TOOLKIT_MARKS

from npudure.backends.rknn import model_record
from npudure.config import AgentConfig
from npudure_workshop.model.build import cache_dir, ensure_model
from npudure_workshop.model.convert import converted_onnx_path, meta_path

pytestmark = TOOLKIT_MARKS
NAMES = ("forklift", "pallet")
SOC = "rk3588"


CASES = {"nc2-320": (2, 320, NAMES), "nc1-640": (1, 640, ("person",))}


@pytest.fixture(scope="module", params=sorted(CASES))
def converted(request) -> dict:
    nc, size, names = CASES[request.param]
    onnx = ensure_model("standard", nc=nc, size=size, names=names).path
    out_dir = cache_dir() / "rknn"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "npudure",
            "model",
            "convert",
            "--platform",
            SOC,
            "--out-dir",
            str(out_dir),
            str(onnx),
        ],
        capture_output=True,
        text=True,
        timeout=1500,
    )
    return {"proc": proc, "rknn": out_dir / f"{onnx.stem}-{SOC}.rknn", "nc": nc, "size": size, "names": names}


def test_standard_export_converts_and_passes_the_simulator_check(converted) -> None:
    proc = converted["proc"]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    print(proc.stdout)  # match rates per class and cosine per output, for the record (pytest -s)
    out = proc.stdout
    nc, size, names = converted["nc"], converted["size"], converted["names"]
    shown = ", ".join(repr(n) for n in names)
    assert f"model   {nc} classes ({shown}), {size}x{size} input, standard export rewritten" in out
    assert "check   PASSED" in out
    assert sum(line.startswith("output  ") and "cosine" in line for line in out.splitlines()) == 6  # no sum
    assert any(line.startswith(f"class   0 {names[0]!r}") for line in out.splitlines())


def test_record_beside_the_model_feeds_the_agent(converted) -> None:
    rknn: Path = converted["rknn"]
    meta = json.loads(meta_path(rknn).read_text())
    nc, size, names = converted["nc"], converted["size"], converted["names"]
    assert meta["source_layout"] == "standard" and meta["num_classes"] == nc
    assert meta["names"] == list(names) and meta["input_size"] == size
    assert meta["input"] == f"uint8 NHWC RGB {size}x{size}"
    assert converted_onnx_path(rknn).is_file() and rknn.read_bytes()[:4] == b"RKNN"
    assert model_record(rknn, AgentConfig(node_name="b", backend="rknn", model=str(rknn))) == (size, names)
