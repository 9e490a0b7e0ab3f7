"""``npudure model``: build the YOLOv8n ONNX file (cached), inspect a model, write calibration frames."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

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
        choices=("split", "zoo"),
        default="split",
        help="split: boxes [1,4,8400] + scores [1,80,8400] (ONNX Runtime); zoo: 9 outputs as "
        "rknn_model_zoo (for conversion to .rknn). Default: split",
    )
    build.add_argument("--int8", action="store_true", help="static INT8 QDQ quantization (split layout)")
    build.add_argument("--seed", type=int, default=0, help="weight and calibration seed (default 0)")
    build.add_argument("--force", action="store_true", help="rebuild even if the file exists")
    build.add_argument("--threads", type=int, default=2, help="ONNX Runtime threads for calibration")

    info = sub.add_parser("info", help="show a model's inputs, outputs, parameters, FLOPs and sha256")
    info.add_argument("path", type=Path)

    frames = sub.add_parser(
        "frames",
        help="write seeded synthetic frames as PNG (+ dataset.txt for rknn-toolkit2 quantization)",
    )
    frames.add_argument("--out", type=Path, required=True, help="folder to write into")
    frames.add_argument("--count", type=int, default=20)
    frames.add_argument("--first-seed", type=int, default=0)


def _build(args: argparse.Namespace) -> int:
    try:
        from npudure.model.build import ModelBuildError, ensure_model
    except ImportError:
        print(f"npudure model build: {_NEEDS_ONNX}", file=sys.stderr)
        return 2
    try:
        result = ensure_model(
            layout=args.layout,
            int8=args.int8,
            seed=args.seed,
            path=args.out,
            force=args.force,
            threads=args.threads,
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
    print(f"GFLOPs  {result.gflops:.2f} (2 x Conv multiply-accumulates, 640x640, batch 1)")
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
        from npudure.model.info import inspect
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

    from npudure.frames import synthetic_frame

    if args.count < 1:
        print("npudure model frames: --count must be 1 or more", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    names = []
    for seed in range(args.first_seed, args.first_seed + args.count):
        name = args.out / f"frame-{seed:06d}.png"
        Image.fromarray(synthetic_frame(seed)).save(name)
        names.append(str(name.resolve()))
    (args.out / "dataset.txt").write_text("\n".join(names) + "\n")
    print(f"wrote {len(names)} frames and {args.out / 'dataset.txt'}")
    return 0


def run(args: argparse.Namespace) -> int:
    return {"build": _build, "info": _info, "frames": _frames}[args.model_command](args)
