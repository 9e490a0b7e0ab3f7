"""``npudure model convert``: the zoo-layout ONNX -> INT8 ``.rknn`` for rk3576/rk3588, built on x86 with
the vendor's rknn-toolkit2 (in its own venv, npudure/model/toolkit.py), then checked in its simulator.

Beside ``model.rknn`` goes ``model.rknn.json``: toolkit version, target platform, the .rknn's and the
ONNX's sha256, the calibration set. The boards' librknnrt must be that toolkit version (preflight
checks it). A second run with the same ONNX, platform, toolkit and calibration reuses the file.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from npudure.backends.base import sha256_file
from npudure.model import toolkit as tk
from npudure.vision import frames
from npudure.vision.frames import synthetic_frame

PLATFORMS = ("rk3576", "rk3588")
META_FORMAT = 1
CALIB_FRAMES = 20
CHECK_FRAMES = 4
CALIB_FIRST_SEED = 2 * 10**9  # far from the seeds tests, benches and the model's own calibration use
CHECK_FIRST_SEED = 3 * 10**9
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp")

# Exit codes (sysexits.h), so scripts and the Ansible step can tell the causes apart.
EX_USAGE, EX_DATAERR, EX_NOINPUT, EX_UNAVAILABLE, EX_SOFTWARE = 64, 65, 66, 69, 70

Log = Callable[[str], None]


class ConvertError(Exception):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class ConvertResult:
    path: Path
    meta: dict
    cached: bool
    seconds: float
    sim_outputs: Path | None  # the simulator's outputs on the check frames (.npz), if run
    check_frames: np.ndarray | None


def meta_path(rknn: Path) -> Path:
    return rknn.with_name(rknn.name + ".json")


def sim_path(rknn: Path) -> Path:
    return rknn.with_name(rknn.name + ".sim.npz")


def read_meta(rknn: Path) -> dict | None:
    try:
        return json.loads(meta_path(rknn).read_text())
    except (OSError, ValueError):
        return None


def check_onnx(path: Path) -> str:
    """The ONNX file's sha256 after checking it is there and has the zoo layout (9 outputs)."""
    if not path.is_file():
        raise ConvertError(
            f"{path}: no such ONNX file; build it with `npudure model build --layout zoo`", EX_NOINPUT
        )
    from npudure.model.info import inspect
    from npudure.vision.postprocess import LayoutError, detect_layout

    try:
        info = inspect(path)
        shapes = [t.shape for t in info.outputs]
        if any(not isinstance(d, int) for s in shapes for d in s):
            raise LayoutError(f"outputs with symbolic dimensions: {[str(t) for t in info.outputs]}")
        layout = detect_layout(shapes)  # type: ignore[arg-type]
    except (ValueError, LayoutError) as exc:
        raise ConvertError(f"{path}: {exc}", EX_DATAERR) from None
    if layout != "zoo" or len(shapes) != 9:
        raise ConvertError(
            f"{path} has the {layout!r} layout ({len(shapes)} outputs); the NPU needs the rknn_model_zoo "
            "layout with 9 outputs: rebuild with `npudure model build --layout zoo`",
            EX_DATAERR,
        )
    if info.quantized:
        raise ConvertError(
            f"{path} is already quantized (QDQ); give rknn-toolkit2 the float zoo model", EX_DATAERR
        )
    return info.sha256


def load_images(folder: Path, limit: int | None = None) -> tuple[list[np.ndarray], str]:
    """The user's images letterboxed to 640x640 RGB uint8 (as YOLOv8 sees them), and the files' digest."""
    from PIL import Image, UnidentifiedImageError

    if not folder.is_dir():
        raise ConvertError(f"--images {folder}: no such folder", EX_NOINPUT)
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())
    if not files:
        raise ConvertError(
            f"--images {folder}: no {'/'.join(s[1:] for s in IMAGE_SUFFIXES)} files in it", EX_NOINPUT
        )
    files = files[:limit] if limit else files
    digest = hashlib.sha256()
    images = []
    for f in files:
        data = f.read_bytes()
        digest.update(hashlib.sha256(data).digest())
        try:
            with Image.open(f) as img:
                images.append(frames.letterbox(img))
        except (UnidentifiedImageError, OSError) as exc:
            raise ConvertError(f"--images: {f} is not a readable image ({exc})", EX_DATAERR) from None
    return images, digest.hexdigest()


def calibration_set(images: Path | None, count: int) -> tuple[list[np.ndarray], str]:
    if images is not None:
        frames, digest = load_images(images, count)
        return frames, f"images:{digest[:16]}:{len(frames)}"
    return [synthetic_frame(CALIB_FIRST_SEED + i) for i in range(count)], f"seeded:{CALIB_FIRST_SEED}:{count}"


def check_set(images: Path | None, count: int) -> np.ndarray:
    """Frames for the simulator check: the user's images when given (they are what matters), else seeded."""
    if images is not None:
        frames, _ = load_images(images, count)
    else:
        frames = [synthetic_frame(CHECK_FIRST_SEED + i) for i in range(count)]
    return np.stack(frames)


def default_output(onnx: Path, platform: str, out_dir: Path | None) -> Path:
    return (out_dir or onnx.parent) / f"{onnx.stem}-{platform}.rknn"


def _reusable(target: Path, want: dict, check_frames: int) -> bool:
    meta = read_meta(target)
    if not meta or not target.is_file():
        return False
    if any(meta.get(k) != v for k, v in want.items()):
        return False
    if meta.get("rknn_sha256") != sha256_file(target):
        return False
    return check_frames == 0 or (meta.get("check_frames") == check_frames and sim_path(target).is_file())


def convert(
    onnx: Path,
    platform: str,
    out: Path | None = None,
    *,
    images: Path | None = None,
    calib_count: int = CALIB_FRAMES,
    check_frames: int = CHECK_FRAMES,
    force: bool = False,
    venv: Path | None = None,
    log: Log = print,
) -> ConvertResult:
    """Convert (or reuse) one platform's .rknn; with ``check_frames`` also run the simulator on them."""
    if platform not in PLATFORMS:
        raise ConvertError(f"unknown platform {platform!r}; use one of: {', '.join(PLATFORMS)}", EX_USAGE)
    if calib_count < 1 or check_frames < 0:
        raise ConvertError("--calib-count must be 1 or more and --check-frames 0 or more", EX_USAGE)
    onnx_sha = check_onnx(onnx)
    target = out or default_output(onnx, platform, None)
    calib, calib_key = calibration_set(images, calib_count)
    frames = check_set(images, check_frames) if check_frames else None
    try:
        toolkit = tk.ensure_toolkit(venv, log=log)
    except tk.ToolkitError as exc:
        raise ConvertError(str(exc), EX_UNAVAILABLE) from None
    want = {
        "format": META_FORMAT,
        "onnx_sha256": onnx_sha,
        "target_platform": platform,
        "toolkit": "rknn-toolkit2",
        "toolkit_version": toolkit.version,
        "calibration": calib_key,
    }
    started = time.monotonic()
    if not force and _reusable(target, want, check_frames):
        meta = read_meta(target) or {}
        return ConvertResult(
            target,
            meta,
            True,
            time.monotonic() - started,
            sim_path(target) if frames is not None else None,
            frames,
        )

    target.parent.mkdir(parents=True, exist_ok=True)
    log_file = target.with_name(target.name + ".log")
    with tempfile.TemporaryDirectory(prefix=".convert-", dir=target.parent) as tmp:
        work = Path(tmp)
        dataset = work / "dataset.txt"
        names = []
        for i, frame in enumerate(calib):
            name = work / f"calib-{i:04d}.npy"
            # The toolkit wants .npy calibration inputs as NCHW (1,3,H,W), before its mean/std.
            np.save(name, frame.transpose(2, 0, 1)[None])
            names.append(str(name))
        dataset.write_text("\n".join(names) + "\n")
        staged = work / target.name
        request = {
            "onnx": str(onnx.resolve()),
            "platform": platform,
            "dataset": str(dataset),
            "out": str(staged),
        }
        if frames is not None:
            np.save(work / "frames.npy", frames)
            request |= {"frames": str(work / "frames.npy"), "sim_out": str(work / "sim.npz")}
        log(f"converting {onnx.name} for {platform} with rknn-toolkit2 {toolkit.version} (log: {log_file})")
        try:
            result = tk.run_worker(toolkit, request, log_file)
        except tk.ToolkitError as exc:
            raise ConvertError(str(exc), EX_SOFTWARE) from None
        meta = {
            **want,
            "rknn_sha256": sha256_file(staged),
            "rknn_bytes": staged.stat().st_size,
            "onnx": onnx.name,
            "quantization": "int8 (asymmetric, rknn-toolkit2 default), mean 0 std 255 on the NPU",
            "input": "uint8 NHWC RGB 640x640",
            "build_seconds": round(result["build_seconds"], 2),
            "check_frames": check_frames,
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        if frames is not None:
            meta["sim_seconds_per_frame"] = round(result["sim_seconds_per_frame"], 3)
            os.replace(work / "sim.npz", sim_path(target))
        os.replace(staged, target)
        tmp_meta = work / "meta.json"
        tmp_meta.write_text(json.dumps(meta, indent=2) + "\n")
        os.replace(tmp_meta, meta_path(target))
    return ConvertResult(
        target,
        meta,
        False,
        time.monotonic() - started,
        sim_path(target) if frames is not None else None,
        frames,
    )


def simulator_check(result: ConvertResult, onnx: Path, score_threshold: float) -> object:
    from npudure.model.simcheck import compare, load_sim_outputs, onnx_outputs

    assert result.sim_outputs is not None and result.check_frames is not None
    frames = result.check_frames
    return compare(
        onnx_outputs(onnx, frames), load_sim_outputs(result.sim_outputs, len(frames)), score_threshold
    )


def platforms_arg(values: Sequence[str] | None) -> list[str]:
    chosen = list(dict.fromkeys(values or PLATFORMS))
    for p in chosen:
        if p not in PLATFORMS:
            raise ConvertError(f"unknown platform {p!r}; use one of: {', '.join(PLATFORMS)}", EX_USAGE)
    return chosen


__all__ = [
    "PLATFORMS",
    "ConvertError",
    "ConvertResult",
    "check_onnx",
    "convert",
    "meta_path",
    "platforms_arg",
    "read_meta",
    "simulator_check",
]
