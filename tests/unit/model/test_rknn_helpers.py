"""Fast checks of the rknn helpers: the simulator comparison, the converter lock, binfmt registration,
the arm64 image and inventory bits (no toolkit, no root, no lab)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from npudure_workshop.lab import binfmt, image, inventory
from npudure_workshop.lab.lab import arm64_board_names
from npudure_workshop.lab.network import plan_nodes
from npudure_workshop.model import simcheck, toolkit

ROOT = Path(__file__).resolve().parents[3]


# ---------------------------------------------------------------- simulator comparison
@pytest.fixture(scope="module")
def onnx_ref(model_cache):
    from npudure_workshop.model.build import ensure_model
    from npudure_workshop.model.convert import check_set

    frames = check_set(None, 2)
    return simcheck.onnx_outputs(ensure_model(layout="zoo").path, frames)


def test_small_noise_passes_and_a_transposed_output_fails(onnx_ref) -> None:
    rng = np.random.default_rng(0)
    noisy = [[o + rng.normal(0, 0.002, o.shape).astype(np.float32) for o in f] for f in onnx_ref]
    good = simcheck.compare(onnx_ref, noisy)
    assert good.passed and good.onnx_detections > 0 and good.match_rate > 0.9
    assert len(good.outputs) == 9 and good.min_cosine > 0.95
    bad = [[o.transpose(0, 1, 3, 2) if o.shape[1] == 80 else o for o in f] for f in noisy]
    result = simcheck.compare(onnx_ref, bad)
    assert not result.passed and result.match_rate < simcheck.MIN_MATCH_RATE
    assert any("FAILED" in line for line in result.lines())


def test_a_wrong_output_shape_is_reported_not_decoded(onnx_ref) -> None:
    nhwc = [[o.transpose(0, 2, 3, 1) for o in f] for f in onnx_ref]
    result = simcheck.compare(onnx_ref, nhwc)
    assert "output layout changed" in result.problem and not result.passed


def test_match_detections_needs_class_and_overlap() -> None:
    ref = np.array([[0, 0, 10, 10, 0.9, 1], [20, 20, 30, 30, 0.8, 2]], np.float32)
    assert simcheck.match_detections(ref, ref.copy()) == 2
    other_class = ref.copy()
    other_class[:, 5] = 5
    assert simcheck.match_detections(ref, other_class) == 0
    shifted = ref.copy()
    shifted[:, [0, 2]] += 6  # IoU 4/16 = 0.25 < 0.5
    assert simcheck.match_detections(ref, shifted) == 0


# ---------------------------------------------------------------- the converter's lock
def test_the_toolkit_lock_pins_every_package_with_a_hash() -> None:
    lines = [
        line
        for line in toolkit.REQUIREMENTS.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines and all("==" in line and "--hash=sha256:" in line for line in lines)
    names = {line.split("==")[0] for line in lines}
    assert {"rknn-toolkit2", "torch", "numpy", "onnx", "setuptools"} <= names
    assert toolkit.pinned_version() == "2.5.0"


def test_toolkit_refuses_a_missing_lock(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv(toolkit.REQUIREMENTS_ENV, str(tmp_path / "nope.txt"))
    with pytest.raises(toolkit.ToolkitError, match="no such requirements file"):
        toolkit.ensure_toolkit(tmp_path / "venv", log=lambda _m: None)


# ---------------------------------------------------------------- binfmt_misc
def _fake_binfmt(tmp_path: Path, enabled: bool | None) -> Path:
    d = tmp_path / "binfmt_misc"
    d.mkdir(parents=True)
    (d / "register").write_text("")
    if enabled is not None:
        (d / binfmt.ENTRY).write_text(("enabled" if enabled else "disabled") + "\ninterpreter /x\n")
    return d


def test_registered_reads_the_kernel_entry(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(binfmt, "native_arm64", lambda: False)
    assert binfmt.registered(_fake_binfmt(tmp_path / "a", True))
    assert not binfmt.registered(_fake_binfmt(tmp_path / "b", False))
    assert not binfmt.registered(_fake_binfmt(tmp_path / "c", None))
    assert "already registered" in binfmt.ensure_arm64(tmp_path / "a" / "binfmt_misc")


def test_without_qemu_or_root_the_reason_and_fix_are_given(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(binfmt, "native_arm64", lambda: False)
    d = _fake_binfmt(tmp_path, None)
    monkeypatch.setattr(binfmt, "CONF_DIRS", (tmp_path / "none",))
    monkeypatch.setattr(binfmt, "find_conf", lambda dirs=(tmp_path / "none",): None)
    with pytest.raises(binfmt.Arm64Unavailable, match="apt-get install qemu-user-static"):
        binfmt.ensure_arm64(d)


def test_find_conf_reads_the_package_line(tmp_path) -> None:
    (tmp_path / "qemu-aarch64.conf").write_text("# comment\n:qemu-aarch64:M::\\x7fELF:\\xff:/usr/bin/q:OPF\n")
    assert binfmt.find_conf((tmp_path,)) == ":qemu-aarch64:M::\\x7fELF:\\xff:/usr/bin/q:OPF"
    assert binfmt.find_conf((tmp_path / "missing",)) is None


def test_non_root_cannot_register(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(binfmt, "native_arm64", lambda: False)
    d = _fake_binfmt(tmp_path, None)
    (tmp_path / "qemu-aarch64.conf").write_text(":qemu-aarch64:M::\\x7fELF:\\xff:/bin/sh:OPF\n")
    monkeypatch.setattr(binfmt, "CONF_DIRS", (tmp_path,))
    monkeypatch.setattr(binfmt.os, "geteuid", lambda: 1000)
    with pytest.raises(binfmt.Arm64Unavailable, match="only root can register it"):
        binfmt.ensure_arm64(d)


# ---------------------------------------------------------------- arm64 image, lab, inventory
def test_arm64_image_sits_beside_the_native_one(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("NPUDURE_LAB_CACHE", str(tmp_path / "lab-image-bookworm"))
    assert image.cache_dir("arm64") == tmp_path / "lab-image-bookworm-arm64"
    cmd = image.debootstrap_cmd(tmp_path / "img", "http://m/debian", arch="arm64")
    assert "--arch=arm64" in cmd and "--arch=arm64" not in image.debootstrap_cmd(tmp_path, "http://m/debian")
    img = tmp_path / "img"
    img.mkdir()
    marker = {"format": image.IMAGE_FORMAT, "packages": list(image.PACKAGES), "arch": "arm64"}
    (img / image.MARKER).write_text(json.dumps(marker))
    assert image.image_ok(img, "arm64") and not image.image_ok(img)  # never mistaken for the native one


def test_the_last_boards_are_arm64_and_the_inventory_says_so(tmp_path) -> None:
    nodes = plan_nodes(3, True)
    assert arm64_board_names(nodes, 1) == ["board3"]
    assert arm64_board_names(nodes, 0) == []
    inv = inventory.render(nodes, tmp_path / "key", arm64=["board3"])
    hosts = inv["all"]["children"]["boards"]["hosts"]
    assert hosts["board3"]["npudure_lab_arch"] == "arm64" and "npudure_lab_arch" not in hosts["board1"]


def test_more_arm64_boards_than_boards_is_refused(tmp_path) -> None:
    from npudure_workshop.lab import Lab, LabError

    with pytest.raises(LabError, match=r"--arm64-boards must be between 0 and the number of boards \(1\)"):
        Lab(tmp_path / "state").up(boards=1, arm64_boards=2, log=lambda _m: None)
    assert not (tmp_path / "state").exists()  # refused before anything was made
