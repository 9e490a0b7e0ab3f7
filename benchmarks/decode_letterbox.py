#!/usr/bin/env python3
"""What a JPEG/PNG of another size costs the board's CPU before the NPU: decode + letterbox to the
model's input (npudure.vision.frames.decode_for_model, the agent's decode stage). Prints figures,
asserts nothing.

The images are real photographs (scikit-image's wheel) scaled to each source size and encoded once;
each measurement repeats the decode of the same bytes in this process, single-threaded, so it is the
cost per frame on one core of THIS machine (not a board's: an RK3588's A76 cores are slower).

    .venv/bin/python benchmarks/decode_letterbox.py              # ~20 s
    .venv/bin/python benchmarks/decode_letterbox.py --quick      # smoke run, figures are noise
"""

from __future__ import annotations

import argparse
import io
import os
import platform
import statistics
import time

from PIL import Image

from npudure.proto import inference_pb2 as pb
from npudure.vision.frames import decode_for_model
from npudure_workshop.bench.fmt import text_table
from npudure_workshop.model import photos

SOURCES = [(1920, 1080), (2560, 1440), (1280, 720), (640, 640), (320, 320)]


def encoded(w: int, h: int, kind: str) -> bytes:
    with Image.open(photos.photo_path("motorcycle_left.png")) as img:
        scaled = img.convert("RGB").resize((w, h), Image.Resampling.BILINEAR)
    buf = io.BytesIO()
    scaled.save(buf, format=kind, **({"quality": 90} if kind == "JPEG" else {}))
    return buf.getvalue()


def measure(data: bytes, encoding: int, size: int, seconds: float) -> list[float]:
    times = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(times) < 5:
        t0 = time.perf_counter()
        decode_for_model(encoding, data, size)
        times.append(time.perf_counter() - t0)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=1.5, help="measured seconds per case (default 1.5)")
    parser.add_argument("--quick", action="store_true", help="0.1 s per case")
    args = parser.parse_args()
    seconds = 0.1 if args.quick else args.seconds
    print(
        f"decode + letterbox per frame, one thread, {platform.processor() or platform.machine()} "
        f"({os.cpu_count()} CPUs, shared with whatever else runs), Python {platform.python_version()}, "
        f"Pillow {Image.__version__}; {seconds:g} s per case"
    )
    rows = []
    for kind, encoding in (("JPEG", pb.ENCODING_JPEG), ("PNG", pb.ENCODING_PNG)):
        for w, h in SOURCES:
            data = encoded(w, h, kind)
            for size in (640, 320):
                t = sorted(measure(data, encoding, size, seconds))
                p50, p90 = statistics.median(t), t[int(0.9 * (len(t) - 1))]
                rows.append(
                    [f"{w}x{h}", kind, f"{len(data):,}", size, f"{p50 * 1e3:.2f}", f"{p90 * 1e3:.2f}", len(t)]
                )
    print(
        "\n".join(text_table(["source", "kind", "bytes", "model", "p50 ms", "p90 ms", "n"], rows, align="lr"))
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
