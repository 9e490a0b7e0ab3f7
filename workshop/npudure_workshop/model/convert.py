"""``npudure model convert``: a YOLOv8 ONNX -> INT8 ``.rknn`` for rk3576/rk3588, built on x86 with
the vendor's rknn-toolkit2 (in its own venv, model/toolkit.py), then checked in its simulator.

Two kinds of ONNX are taken: the rknn_model_zoo layout (9 outputs, ``npudure model build --layout
zoo``) as it is, and a standard ultralytics export (``yolo export format=onnx``: one output
``(1, 4+nc, N)``, any class count and input size, ``names`` in the metadata), whose head is first
rewritten on the graph into the zoo layout (npudure_workshop/model/rewrite.py) so that INT8 keeps the class
scores; the rewritten graph is kept beside the .rknn (``MODEL-PLATFORM.zoo.onnx``).

Beside ``model.rknn`` goes ``model.rknn.json``: toolkit version, target platform, the .rknn's and the
ONNX's sha256, the calibration set, and the model's class count, class names and input size (the
agent reads them from there). The boards' librknnrt must be that toolkit version (preflight checks
it). A second run with the same ONNX, platform, toolkit and calibration reuses the file.
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
from typing import TYPE_CHECKING

import numpy as np

from npudure.backends.base import sha256_file
from npudure.vision import frames
from npudure.vision.frames import INPUT_SIZE, synthetic_frame
from npudure.vision.labels import NamesError, parse_names, resolve_names
from npudure_workshop.model import toolkit as tk

if TYPE_CHECKING:
    from npudure_workshop.model.simcheck import CheckResult

PLATFORMS = ("rk3576", "rk3588")
META_FORMAT = 3  # 2: num_classes, names, input_size, source_layout; 3: check_set
CALIB_FRAMES = 20
# The check judges detections on at least this many frames when it has to use generic ones, and on
# all of --images (up to MAX_IMAGE_CHECK_FRAMES: the simulator's outputs are held in memory).
CHECK_FRAMES = 50
MAX_IMAGE_CHECK_FRAMES = 200
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
    converted: Path | None = None  # the ONNX the toolkit was given (the rewrite of a standard export)
    check: CheckFrames | None = None


@dataclass(frozen=True)
class CheckFrames:
    """The simulator check's frames, where they came from and whether they are the user's scenes."""

    frames: np.ndarray
    key: str  # in the record: a changed set means a new check
    source: str  # a phrase for the report
    users_scenes: bool


@dataclass(frozen=True)
class SourceModel:
    """The user's ONNX as the converter reads it."""

    path: Path
    sha256: str
    layout: str  # "zoo" (converted as is) or "standard" (rewritten first)
    num_classes: int
    input_size: int
    names: tuple[str, ...]


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
    """The ONNX file's sha256 after checking it is there and is a model :func:`inspect_source` takes."""
    return inspect_source(path).sha256


def inspect_source(path: Path) -> SourceModel:
    """Check the ONNX is there and is the zoo layout or a rewritable standard export; read its shape."""
    if not path.is_file():
        raise ConvertError(
            f"{path}: no such ONNX file; build it with `npudure model build --layout zoo`", EX_NOINPUT
        )
    from npudure.vision.postprocess import LayoutError, detect_layout
    from npudure_workshop.model.info import inspect

    try:
        info = inspect(path)
        if any(not isinstance(d, int) for t in info.outputs for d in t.shape):
            raise LayoutError(f"outputs with symbolic dimensions: {[str(t) for t in info.outputs]}")
        shapes = [tuple(d for d in t.shape if isinstance(d, int)) for t in info.outputs]  # all int (above)
        layout = detect_layout(shapes)
    except (ValueError, LayoutError) as exc:
        raise ConvertError(f"{path}: {exc}", EX_DATAERR) from None
    if (layout != "zoo" or len(shapes) != 9) and layout != "concat":
        raise ConvertError(
            f"{path} has the {layout!r} layout ({len(shapes)} outputs); convert takes a standard "
            "ultralytics export (one output (1, 4+nc, N): `yolo export format=onnx`) or the rknn_model_zoo "
            "layout with 9 outputs (`npudure model build --layout zoo`)",
            EX_DATAERR,
        )
    if info.quantized:
        raise ConvertError(
            f"{path} is already quantized (QDQ); give rknn-toolkit2 the float model", EX_DATAERR
        )
    if layout == "concat":
        import onnx

        from npudure_workshop.model.rewrite import RewriteError, find_head

        try:
            head = find_head(onnx.load(str(path)))
        except RewriteError as exc:
            raise ConvertError(f"{path}: {exc}", EX_DATAERR) from None
        nc, size, kind = head.num_classes, head.input_size, "standard"
    else:
        dims = info.inputs[0].shape if len(info.inputs) == 1 else ()
        if len(dims) != 4 or not isinstance(dims[2], int) or dims[2] != dims[3]:
            raise ConvertError(f"{path}: expected one image input [1,3,S,S], found {info.inputs}", EX_DATAERR)
        nc, size, kind = shapes[1][1], int(dims[2]), "zoo"
    try:
        given = parse_names(info.metadata["names"]) if info.metadata.get("names") else None
        names = resolve_names(int(nc), given, f"{path}'s metadata")
    except NamesError as exc:
        raise ConvertError(f"{path}: {exc}", EX_DATAERR) from None
    return SourceModel(path, info.sha256, kind, int(nc), size, names)


def converted_onnx_path(rknn: Path) -> Path:
    """Where the rewritten (zoo-layout) graph of a standard export is kept, beside the .rknn."""
    return rknn.with_name(rknn.stem + ".zoo.onnx")


def npu_graph(source: SourceModel, target: Path) -> Path:
    """The ONNX to give the toolkit: the zoo file itself, or a standard export's rewrite (written
    beside ``target`` atomically; the rewrite is deterministic, so a rerun writes the same bytes)."""
    if source.layout == "zoo":
        return source.path
    import onnx

    from npudure_workshop.model.rewrite import to_zoo_layout

    rewritten, _ = to_zoo_layout(onnx.load(str(source.path)))
    out = converted_onnx_path(target)
    out.parent.mkdir(parents=True, exist_ok=True)
    staged = out.with_name(f".{out.name}.{os.getpid()}")
    onnx.save(rewritten, str(staged))
    os.replace(staged, out)
    return out


def image_files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        raise ConvertError(f"--images {folder}: no such folder", EX_NOINPUT)
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())
    if not files:
        raise ConvertError(
            f"--images {folder}: no {'/'.join(s[1:] for s in IMAGE_SUFFIXES)} files in it", EX_NOINPUT
        )
    return files


def load_images(
    folder: Path, limit: int | None = None, size: int = INPUT_SIZE
) -> tuple[list[np.ndarray], str]:
    """The user's images letterboxed to size x size RGB uint8 (as YOLOv8 sees them), and the files'
    digest. With ``limit``, that many spread evenly over the sorted names (a camera's files sort by
    time: the first ones would all be one moment)."""
    from PIL import Image, UnidentifiedImageError

    files = image_files(folder)
    if limit and limit < len(files):
        files = [files[i] for i in np.linspace(0, len(files) - 1, limit).round().astype(int)]
    digest = hashlib.sha256()
    images = []
    for f in files:
        data = f.read_bytes()
        digest.update(hashlib.sha256(data).digest())
        try:
            with Image.open(f) as img:
                images.append(frames.letterbox(img, size))
        except (UnidentifiedImageError, OSError) as exc:
            raise ConvertError(f"--images: {f} is not a readable image ({exc})", EX_DATAERR) from None
    return images, digest.hexdigest()


def calibration_set(images: Path | None, count: int, size: int = INPUT_SIZE) -> tuple[list[np.ndarray], str]:
    """The user's images; else real photographs (npudure_workshop/model/photos.py); else, where the package
    that ships them is missing, seeded synthetic frames (the key says which)."""
    if images is not None:
        frames, digest = load_images(images, count, size)
        return frames, f"images:{digest[:16]}:{len(frames)}"
    from npudure_workshop.model import photos

    if photos.version() is not None:
        return photos.calibration_photos(count, size)
    key = f"seeded:{CALIB_FIRST_SEED}:{count}" + ("" if size == INPUT_SIZE else f":{size}")
    return [synthetic_frame(CALIB_FIRST_SEED + i, size) for i in range(count)], key


def check_frames_for(images: Path | None, count: int | None, size: int = INPUT_SIZE) -> CheckFrames:
    """Frames for the simulator check: all of the user's images when given (up to
    MAX_IMAGE_CHECK_FRAMES, or ``count``): they are what matters; else ``count`` (default
    CHECK_FRAMES) held-out generic photographs, else seeded synthetic frames."""
    from npudure_workshop.model import photos

    if images is not None:
        available = len(image_files(images))
        frames, digest = load_images(images, min(count or MAX_IMAGE_CHECK_FRAMES, available), size)
        n = len(frames)
        source = f"{n} of your images (--images {images}" + (
            f", spread over {available})" if n < available else ")"
        )
        return CheckFrames(np.stack(frames), f"images:{digest[:16]}:{n}", source, True)
    count = count or CHECK_FRAMES
    if photos.version() is not None:
        frames = photos.check_photos(count, size)
        source = (
            f"{count} generic photographs ({DEFAULT_CHECK_SOURCE}): they show how faithful the INT8 model "
            "is on everyday scenes, not on your cameras' - pass --images DIR with your scenes"
        )
        key = f"photos:{photos.DISTRIBUTION}-{photos.version()}:{count}"
    else:
        frames = [synthetic_frame(CHECK_FIRST_SEED + i, size) for i in range(count)]
        source = f"{count} seeded synthetic frames (no photographs installed): pass --images DIR with yours"
        key = f"seeded:{CHECK_FIRST_SEED}:{count}"
    return CheckFrames(np.stack(frames), key + ("" if size == INPUT_SIZE else f":{size}"), source, False)


DEFAULT_CHECK_SOURCE = "4 held-out scikit-image photos, their mirrors and seeded crops"


def check_set(images: Path | None, count: int | None, size: int = INPUT_SIZE) -> np.ndarray:
    """The check's frames alone (see :func:`check_frames_for`)."""
    return check_frames_for(images, count, size).frames


def default_output(onnx: Path, platform: str, out_dir: Path | None) -> Path:
    return (out_dir or onnx.parent) / f"{onnx.stem}-{platform}.rknn"


def _reusable(target: Path, want: dict, check: CheckFrames | None) -> bool:
    meta = read_meta(target)
    if not meta or not target.is_file():
        return False
    if any(meta.get(k) != v for k, v in want.items()):
        return False
    if meta.get("rknn_sha256") != sha256_file(target):
        return False
    return check is None or (meta.get("check_set") == check.key and sim_path(target).is_file())


def convert(
    onnx: Path,
    platform: str,
    out: Path | None = None,
    *,
    images: Path | None = None,
    calib_count: int = CALIB_FRAMES,
    check_frames: int | None = None,
    force: bool = False,
    venv: Path | None = None,
    log: Log = print,
) -> ConvertResult:
    """Convert (or reuse) one platform's .rknn, and run the simulator on the check frames: ``None``
    for the default (all of ``images``, else CHECK_FRAMES generic ones), 0 to skip."""
    if platform not in PLATFORMS:
        raise ConvertError(f"unknown platform {platform!r}; use one of: {', '.join(PLATFORMS)}", EX_USAGE)
    if calib_count < 1 or (check_frames is not None and check_frames < 0):
        raise ConvertError("--calib-count must be 1 or more and --check-frames 0 or more", EX_USAGE)
    source = inspect_source(onnx)
    onnx_sha = source.sha256
    target = out or default_output(onnx, platform, None)
    calib, calib_key = calibration_set(images, calib_count, source.input_size)
    check = None if check_frames == 0 else check_frames_for(images, check_frames, source.input_size)
    frames = check.frames if check is not None else None
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
        "source_layout": source.layout,
        "num_classes": source.num_classes,
        "names": list(source.names),
        "input_size": source.input_size,
    }
    started = time.monotonic()
    graph = npu_graph(source, target)

    def outcome(meta: dict, cached: bool) -> ConvertResult:
        # A reused file and a fresh build are described alike: only the record and the flag differ.
        sims = sim_path(target) if frames is not None else None
        return ConvertResult(target, meta, cached, time.monotonic() - started, sims, frames, graph, check)

    if not force and _reusable(target, want, check):
        return outcome(read_meta(target) or {}, True)

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
            "onnx": str(graph.resolve()),
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
            "input": f"uint8 NHWC RGB {source.input_size}x{source.input_size}",
            "converted_onnx": graph.name,
            "converted_onnx_sha256": sha256_file(graph),
            "build_seconds": round(result["build_seconds"], 2),
            "check_frames": 0 if frames is None else len(frames),
            "check_set": check.key if check is not None else None,
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        if frames is not None:
            meta["sim_seconds_per_frame"] = round(result["sim_seconds_per_frame"], 3)
            os.replace(work / "sim.npz", sim_path(target))
        os.replace(staged, target)
        tmp_meta = work / "meta.json"
        tmp_meta.write_text(json.dumps(meta, indent=2) + "\n")
        os.replace(tmp_meta, meta_path(target))
    return outcome(meta, False)


def simulator_check(result: ConvertResult, onnx: Path, score_threshold: float) -> CheckResult:
    """The simulator's outputs against ONNX Runtime's on the graph the toolkit was given."""
    from npudure_workshop.model.simcheck import compare, load_sim_outputs, onnx_outputs, output_names

    assert result.sim_outputs is not None and result.check_frames is not None
    frames = result.check_frames
    names = result.meta.get("names") or None
    graph = result.converted or onnx
    check = compare(
        onnx_outputs(graph, frames),
        load_sim_outputs(result.sim_outputs, len(frames)),
        score_threshold,
        input_size=int(result.meta.get("input_size") or INPUT_SIZE),
        names=names,
        output_names=output_names(graph),
    )
    if result.check is not None:
        check.source, check.users_scenes = result.check.source, result.check.users_scenes
    return check


def platforms_arg(values: Sequence[str] | None) -> list[str]:
    chosen = list(dict.fromkeys(values or PLATFORMS))
    for p in chosen:
        if p not in PLATFORMS:
            raise ConvertError(f"unknown platform {p!r}; use one of: {', '.join(PLATFORMS)}", EX_USAGE)
    return chosen


__all__ = [
    "PLATFORMS",
    "CheckFrames",
    "ConvertError",
    "ConvertResult",
    "SourceModel",
    "check_frames_for",
    "check_onnx",
    "convert",
    "converted_onnx_path",
    "inspect_source",
    "meta_path",
    "platforms_arg",
    "read_meta",
    "simulator_check",
]
