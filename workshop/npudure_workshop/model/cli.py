"""``npudure model``: build the YOLOv8n ONNX file (cached), inspect a model, write calibration frames."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from npudure.argtypes import whole
from npudure.backends.base import sha256_file

_NEEDS_ONNX = "this needs the onnx and onnxruntime packages: pip install 'npudure[onnx]'"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="model_command", metavar="ACTION", required=True)

    build = sub.add_parser(
        "build",
        help="build YOLOv8n as ONNX (untrained, seeded weights); reuses the cached file",
        description="Build YOLOv8n as ONNX with seeded, UNTRAINED weights. The file goes to the cache "
        "($NPUDURE_CACHE/models or ~/.cache/npudure/models) unless --out is given, and an existing "
        "file built with the same settings is reused.",
    )
    build.add_argument("--out", type=Path, help="write here instead of the cache")
    build.add_argument(
        "--layout",
        choices=("split", "zoo", "standard"),
        default="split",
        help="split: boxes [1,4,8400] + scores [1,80,8400] (ONNX Runtime); zoo: 9 outputs as "
        "rknn_model_zoo (for conversion to .rknn); standard: one output [1,4+nc,8400] with `names` "
        "metadata, as `yolo export format=onnx` writes it. Default: split",
    )
    build.add_argument("--classes", type=whole(1), default=80, help="class count (default 80)")
    build.add_argument("--imgsz", type=int, default=640, help="input side, a multiple of 32 (default 640)")
    build.add_argument(
        "--names", help="class names, comma-separated (default: COCO's for 80 classes, else class0, ...)"
    )
    build.add_argument("--int8", action="store_true", help="static INT8 QDQ quantization (split layout)")
    build.add_argument("--seed", type=int, default=0, help="weight and calibration seed (default 0)")
    build.add_argument("--force", action="store_true", help="rebuild even if the file exists")
    build.add_argument("--threads", type=whole(1), default=2, help="ONNX Runtime threads for calibration")

    info = sub.add_parser("info", help="show a model's inputs, outputs, parameters, FLOPs and sha256")
    info.add_argument("path", type=Path)

    check = sub.add_parser(
        "check",
        help="say whether the boards will serve a model file (YOLOv8 outputs, input size, class names)",
        description="Read an .onnx (or an .rknn with the record `npudure model convert` wrote beside it) "
        "as the agent will, without deploying it: one [1,3,S,S] input with a fixed side, YOLOv8 outputs "
        "the post-processing reads, class names that fit the class count. site.yml's preflight runs it "
        "for every model a board is to hold. Prints one line; exit 65 with the reason and the fix when "
        "the boards would refuse it.",
    )
    check.add_argument("model", type=Path, help="the .onnx or .rknn file")
    check.add_argument(
        "--input-size", type=whole(32), help="the side the boards' config sets (default: the model's own)"
    )
    check.add_argument(
        "--json", action="store_true", help="print path, input_size, classes and names as one JSON object"
    )

    labelmap = sub.add_parser(
        "labelmap",
        help="write Frigate's labelmap for a model (its labelmap_path), COCO-80 without one",
        description="Write the labelmap Frigate's `model: labelmap_path:` takes: one `<id>  <name>` line "
        "per class, from the .rknn's record beside it, an ONNX file's names metadata, or, with no "
        "model, npudure's own COCO-80 model.",
    )
    labelmap.add_argument("model", type=Path, nargs="?", help="the .rknn or .onnx the boards serve")
    labelmap.add_argument("--out", type=Path, help="write here instead of standard output")

    frames = sub.add_parser(
        "frames",
        help="write seeded synthetic frames as PNG (+ dataset.txt for rknn-toolkit2 quantization)",
    )
    frames.add_argument("--out", type=Path, required=True, help="folder to write into")
    frames.add_argument("--count", type=whole(1), default=20)
    frames.add_argument("--first-seed", type=int, default=0)

    conv = sub.add_parser(
        "convert",
        help="convert a YOLOv8 ONNX (standard ultralytics export or zoo layout) to INT8 .rknn (rk3576, "
        "rk3588) and check it in the simulator",
        description="Convert a YOLOv8 ONNX to INT8 .rknn with the vendor's x86 rknn-toolkit2. "
        "Takes a standard "
        "ultralytics export (`yolo export format=onnx`: one output (1, 4+nc, N), any class count and "
        "input size, class names from the metadata), whose head is rewritten on the graph into the NPU-"
        "friendly zoo layout first (kept as MODEL-PLATFORM.zoo.onnx), or the 9-output zoo layout as is. "
        "rknn-toolkit2 is installed into its own virtualenv (~/.cache/npudure/rknn-toolkit2-venv) from a "
        "hash-locked requirements file; the .rknn then runs in the toolkit's simulator on the same frames"
        " as the ONNX model, and outputs and detections are compared. Writes MODEL-PLATFORM.rknn and "
        "MODEL-PLATFORM.rknn.json (toolkit version, platform, sha256, class count and names, input size)."
        " The check matches detections (class + IoU >= 0.5) overall and per class, with a 95% interval "
        "over frames, and fails on detections that disagree or on a box or class-score output that INT8 "
        "spoils; the failure names the likely cause and the next step."
        " Exit codes: 64 bad arguments, 65 wrong model layout (or not a YOLOv8 head: the node expected is"
        " named), 66 missing input, 69 toolkit not installable, 70 conversion failed, 1 simulator check "
        "failed.",
    )
    conv.add_argument(
        "onnx",
        nargs="?",
        type=Path,
        help="standard ultralytics export or zoo-layout ONNX (default: the cached seed-0 zoo one)",
    )
    conv.add_argument(
        "--platform",
        action="append",
        metavar="SOC",
        help="rk3576 or rk3588; repeatable (default: both)",
    )
    conv.add_argument("--out-dir", type=Path, help="where the .rknn files go (default: beside the ONNX)")
    conv.add_argument(
        "--images",
        type=Path,
        help="your scenes, a folder of jpg/png: they calibrate INT8 and the check judges the model on all of "
        "them (default: generic photographs, which say little about your cameras)",
    )
    conv.add_argument(
        "--calib-count", type=int, default=20, help="calibration frames, spread over --images (default 20)"
    )
    conv.add_argument(
        "--check-frames",
        type=int,
        help="simulator check frames, 0 to skip (default: all of --images up to 200, else 50 generic ones)",
    )
    conv.add_argument(
        "--check-threshold", type=float, default=0.25, help="score threshold for the check (default 0.25)"
    )
    conv.add_argument("--force", action="store_true", help="convert again even if a matching .rknn exists")
    conv.add_argument(
        "--toolkit-venv",
        type=Path,
        help="rknn-toolkit2's virtualenv (default ~/.cache/npudure/rknn-toolkit2-venv)",
    )


def _build(args: argparse.Namespace) -> int:
    try:
        from npudure_workshop.model.build import ModelBuildError, ensure_model
    except ImportError:
        print(f"npudure model build: {_NEEDS_ONNX}", file=sys.stderr)
        return 2
    try:
        names = tuple(n.strip() for n in args.names.split(",")) if args.names else None
        if names is not None and len(names) != args.classes:
            raise ModelBuildError(f"--names gives {len(names)} names for --classes {args.classes}")
        result = ensure_model(
            layout=args.layout,
            int8=args.int8,
            seed=args.seed,
            path=args.out,
            force=args.force,
            threads=args.threads,
            nc=args.classes,
            size=args.imgsz,
            names=names,
        )
    except ModelBuildError as exc:
        print(f"npudure model build: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"npudure model build: cannot write the model: {exc}", file=sys.stderr)
        return 1
    print(f"{'cached' if result.cached else 'built'}  {result.path}")
    print(f"sha256  {result.sha256}")
    print(
        f"params  {result.params:,} (BatchNorm folded); {result.params_unfused:,} unfused, as ultralytics "
        "counts"
    )
    print(
        f"GFLOPs  {result.gflops:.2f} (2 x Conv multiply-accumulates, {result.size}x{result.size}, batch 1)"
    )
    print(f"shape   {result.nc} classes, {result.size}x{result.size} input, layout {result.layout}")
    print(f"time    {result.seconds:.2f} s{' (reading the cached file)' if result.cached else ''}")
    print("note    untrained weights: real architecture and compute, detections without meaning")
    return 0


def _info(args: argparse.Namespace) -> int:
    path: Path = args.path
    if not path.is_file():
        print(f"npudure model info: {path}: no such file", file=sys.stderr)
        return 1
    if path.suffix != ".onnx":
        print(f"file    {path}\nsize    {path.stat().st_size:,} bytes\nsha256  {sha256_file(path)}")
        print("(not an .onnx file: only its size and hash are shown)")
        return 0
    try:
        from npudure_workshop.model.info import inspect
    except ImportError:
        print(f"npudure model info: {_NEEDS_ONNX}", file=sys.stderr)
        return 2
    try:
        info = inspect(path)
    except ValueError as exc:
        print(f"npudure model info: {exc}", file=sys.stderr)
        return 1
    print(f"file    {info.path}\nsize    {info.size_bytes:,} bytes\nsha256  {info.sha256}")
    for t in info.inputs:
        print(f"input   {t}")
    for t in info.outputs:
        print(f"output  {t}")
    print(f"params  {info.params:,} (Conv weights and biases)")
    print(f"GFLOPs  {info.gflops:.2f} (2 x Conv multiply-accumulates, batch 1)")
    print(f"int8    {'yes (QDQ)' if info.quantized else 'no'}")
    for key, value in sorted(info.metadata.items()):
        print(f"meta    {key} = {value}")
    return 0


def _frames(args: argparse.Namespace) -> int:
    from PIL import Image

    from npudure.vision.frames import synthetic_frame

    args.out.mkdir(parents=True, exist_ok=True)
    names = []
    for seed in range(args.first_seed, args.first_seed + args.count):
        name = args.out / f"frame-{seed:06d}.png"
        Image.fromarray(synthetic_frame(seed)).save(name)
        names.append(str(name.resolve()))
    (args.out / "dataset.txt").write_text("\n".join(names) + "\n")
    print(f"wrote {len(names)} frames and {args.out / 'dataset.txt'}")
    return 0


def _convert(args: argparse.Namespace) -> int:
    try:
        from npudure_workshop.model.convert import ConvertError, convert, platforms_arg, simulator_check
    except ImportError:
        print(f"npudure model convert: {_NEEDS_ONNX}", file=sys.stderr)
        return 69
    failures: list[str] = []
    try:
        platforms = platforms_arg(args.platform)
        onnx = args.onnx
        if onnx is None:
            from npudure_workshop.model.build import ensure_model

            onnx = ensure_model(layout="zoo").path
        for platform in platforms:
            out = args.out_dir / f"{onnx.stem}-{platform}.rknn" if args.out_dir else None
            result = convert(
                onnx,
                platform,
                out,
                images=args.images,
                calib_count=args.calib_count,
                check_frames=args.check_frames,
                force=args.force,
                venv=args.toolkit_venv,
                log=lambda m: print(m, file=sys.stderr),
            )
            meta = result.meta
            print(f"{'cached' if result.cached else 'built'}  {result.path}")
            names = meta.get("names") or []
            shown = ", ".join(repr(n) for n in names[:5]) + (", ..." if len(names) > 5 else "")
            print(
                f"model   {meta.get('num_classes')} classes ({shown}), {meta.get('input_size')}x"
                f"{meta.get('input_size')} input, "
                + (
                    f"standard export rewritten to the zoo layout: {result.converted}"
                    if meta.get("source_layout") == "standard"
                    else "zoo layout"
                )
            )
            print(f"sha256  {meta['rknn_sha256']}")
            print(
                f"target  {meta['target_platform']}, rknn-toolkit2 {meta['toolkit_version']} (boards need "
                f"librknnrt {meta['toolkit_version']}), calibration {meta['calibration']}"
            )
            if not result.cached:
                print(f"time    {meta['build_seconds']:.1f} s to build; {result.seconds:.1f} s in all")
            if args.images is None:
                print(
                    "note    calibrated on generic photographs: INT8 ranges fit everyday scenes, not "
                    "necessarily your cameras'; --images DIR calibrates on yours"
                )
            if result.sim_outputs is not None:
                check = simulator_check(result, onnx, args.check_threshold)
                for line in check.lines():
                    print(line)
                if "sim_seconds_per_frame" in meta:
                    print(f"sim     {meta['sim_seconds_per_frame']:.2f} s per frame in the x86 simulator")
                if not check.passed:
                    steps = check.advice()
                    failures.append(
                        f"{platform}: {'; '.join(check.reasons())}"
                        + (f"; next: {'; or '.join(steps)}" if steps else "")
                    )
    except ConvertError as exc:
        print(f"npudure model convert: {exc}", file=sys.stderr)
        return exc.code
    except OSError as exc:
        print(f"npudure model convert: {exc}", file=sys.stderr)
        return 74
    if failures:
        print(f"npudure model convert: the simulator check failed: {' | '.join(failures)}", file=sys.stderr)
        return 1
    return 0


def _labelmap(args: argparse.Namespace) -> int:
    from npudure_workshop.model.labelmap import LabelmapError, names_of, render

    try:
        text = render(names_of(args.model))
    except LabelmapError as exc:
        print(f"npudure model labelmap: {exc}", file=sys.stderr)
        return 65  # EX_DATAERR: the model, not the command line
    if args.out is None:
        sys.stdout.write(text)
        return 0
    try:
        args.out.write_text(text)
    except OSError as exc:
        print(f"npudure model labelmap: cannot write {args.out}: {exc.strerror}", file=sys.stderr)
        return 73  # EX_CANTCREAT
    return 0


def _check(args: argparse.Namespace) -> int:
    from npudure_workshop.model.check import ModelCheckError, check_model

    try:
        checked = check_model(args.model, args.input_size)
        print(json.dumps(checked.as_dict()) if args.json else checked.line())
    except ModelCheckError as exc:
        print(f"npudure model check: {exc}", file=sys.stderr)
        return 65  # EX_DATAERR: the model, not the command line
    return 0


def run(args: argparse.Namespace) -> int:
    commands = {
        "build": _build,
        "info": _info,
        "frames": _frames,
        "convert": _convert,
        "labelmap": _labelmap,
        "check": _check,
    }
    return commands[args.model_command](args)
