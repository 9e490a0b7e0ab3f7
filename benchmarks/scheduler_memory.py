#!/usr/bin/env python3
"""The scheduler's memory under steady load on loopback: prints figures, asserts nothing.

A scheduler and 3 sim agents (EMULATED NPU) as processes on loopback, closed-loop load through the
scheduler for ``--minutes``; the scheduler runs with ``--memory-profile`` (tracemalloc), so its log
says which source lines hold more Python memory than after the warm-up. Beside it, the scheduler's
VmRSS every ``--interval`` seconds and its slope (MiB/min) over the second half of the run: a climbing
RSS with a flat traced total points at the allocator or C-core, not at Python objects.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/scheduler_memory.py --minutes 10 --profile-s 60
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from npudure.proto import inference_pb2 as pb
from npudure.service import memprofile
from npudure_workshop.faults.background import BackgroundLoad
from npudure_workshop.lab.local import LocalCluster


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--interval", type=float, default=10.0, help="RSS sample interval, s")
    parser.add_argument("--profile-s", type=float, default=60.0, help="tracemalloc report interval, s")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--time-scale", type=float, default=3.0, help="sim slow-down (less CPU)")
    parser.add_argument("--workdir", type=Path, help="keep configs and logs here")
    args = parser.parse_args()
    os.environ[memprofile.ENV] = str(args.profile_s)  # the scheduler's CLI reads it
    frame = pb.InferRequest(
        encoding=pb.ENCODING_RAW_RGB, frame=np.zeros((640, 640, 3), np.uint8).tobytes()
    ).SerializeToString()
    duration_s = args.minutes * 60
    samples: list[tuple[float, float]] = []
    with LocalCluster(
        boards=3, time_scale=args.time_scale, workdir=args.workdir, log_level="INFO"
    ) as cluster:
        assert cluster.scheduler is not None and cluster.scheduler.pid is not None
        pid = cluster.scheduler.pid
        t0 = time.perf_counter()
        load = BackgroundLoad(cluster.address, [frame], args.concurrency, 5.0, duration_s, t0)
        load.start()
        while load.is_alive() and time.perf_counter() - t0 < duration_s + 5:
            samples.append((time.perf_counter() - t0, rss_mib(pid)))
            print(f"t={samples[-1][0]:6.0f}s scheduler RSS {samples[-1][1]:7.1f} MiB", flush=True)
            time.sleep(args.interval)
        result = load.join()
        log = cluster.logs("scheduler")
    ok = int(result.samples.ok.sum())
    print(
        f"\nload: {ok} ok / {len(result.samples)} requests, concurrency {args.concurrency}, "
        f"{args.minutes:g} min, 3 sim boards (EMULATED), time_scale {args.time_scale:g}"
    )
    half = [s for s in samples if s[0] >= samples[-1][0] / 2]
    if len(half) >= 3:
        slope = statistics.linear_regression([t for t, _ in half], [r for _, r in half]).slope * 60
        print(
            f"scheduler RSS: {samples[0][1]:.1f} -> {samples[-1][1]:.1f} MiB; second-half slope "
            f"{slope:+.3f} MiB/min"
        )
    reports = [line for line in log.splitlines() if "memory profile:" in line]
    print("last tracemalloc reports (since the base after the warm-up):")
    print("\n".join(reports[-2 * (memprofile.TOP + 1) :]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
