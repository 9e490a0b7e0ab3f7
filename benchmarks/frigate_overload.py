#!/usr/bin/env python3
"""Frigate's detectors against the cluster beyond its capacity: goodput, and how fast it recovers.
Prints figures, asserts nothing.

A real scheduler and real `sim` agents on loopback (EMULATED NPU, sim v2, SYNTHETIC detections so a
served frame is told from a refused one). Three phases, the same cluster throughout:

1. capacity: ``--patient`` detectors with a long timeout, one request each in flight (what the cluster
   serves when nobody gives up);
2. overload: ``--detectors`` Frigate-shaped clients, each as Frigate's own: one request in flight,
   Frigate's timeout (zmq: 200 ms, then a new socket; deepstack: 0.1 s), the next frame at once;
3. after: the load drops to ``--after`` such clients; the share of their frames answered within the
   timeout in the first second, and over the rest of the phase.

Frigate's timeouts are multiplied by the time scale: an emulated board is that many times slower than
a board, and the deadline is kept in board time (the report says so).

Goodput = frames answered in time with the board's detections (a frame the scheduler refuses as one
it cannot finish in time comes back as zeros at once, by design: Frigate's socket stays usable).

    .venv/bin/python benchmarks/frigate_overload.py --api zmq --out build/frigate_overload_zmq.json
    .venv/bin/python benchmarks/frigate_overload.py --api http
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import requests
from PIL import Image

from npudure.backends import sim_npu
from npudure.vision.frames import synthetic_frame
from npudure_workshop.bench.cpu import host_cpu_busy_s, host_window
from npudure_workshop.bench.frigate import FrigateDetector
from npudure_workshop.lab.local import LocalCluster

ZMQ_TIMEOUT_MS = 200  # Frigate's zmq detector default (request_timeout_ms)
HTTP_TIMEOUT_S = 0.1  # Frigate's deepstack detector default (api_timeout)
SIDE = 320  # Frigate's common model size


@dataclass
class Tally:
    """Per detector thread: (monotonic end time, served in time?, timed out?) of every frame."""

    frames: list[tuple[float, bool, bool]] = field(default_factory=list)


def _zmq_loop(endpoint: str, timeout_ms: int, tensor: np.ndarray, until: float, tally: Tally) -> None:
    with FrigateDetector(endpoint, timeout_ms) as detector:
        while time.monotonic() < until:
            timeouts = detector.timeouts
            sent = time.monotonic()
            rows = detector.detect_raw(tensor)
            done = time.monotonic()
            timed_out = detector.timeouts > timeouts
            in_time = not timed_out and done - sent <= timeout_ms / 1000 and bool((rows[:, 1] > 0).any())
            tally.frames.append((done, in_time, timed_out))


def _http_loop(url: str, timeout_s: float, body: bytes, until: float, tally: Tally) -> None:
    with requests.Session() as session:
        while time.monotonic() < until:
            sent = time.monotonic()
            try:
                answer = session.post(url, files={"image": body}, data={"api_key": ""}, timeout=timeout_s)
                ok = answer.status_code == 200 and bool(answer.json().get("predictions"))
                timed_out = False
            except requests.RequestException:  # Frigate's timeout: it hangs up and counts no detections
                ok, timed_out = False, True
            done = time.monotonic()
            tally.frames.append((done, ok and done - sent <= timeout_s, timed_out))


def phase(cluster: LocalCluster, api: str, clients: int, timeout_s: float, seconds: float) -> list[Tally]:
    """``clients`` Frigate-shaped loops for ``seconds``; their tallies."""
    picture = synthetic_frame(2, SIDE)
    until = time.monotonic() + seconds
    tallies = [Tally() for _ in range(clients)]
    if api == "zmq":
        tensor = picture[None]
        args = [(cluster.zmq_endpoint, round(timeout_s * 1000), tensor, until, t) for t in tallies]
        target = _zmq_loop
    else:
        buffer = io.BytesIO()
        Image.fromarray(picture).save(buffer, format="JPEG", quality=75)
        args = [(cluster.http_url, timeout_s, buffer.getvalue(), until, t) for t in tallies]
        target = _http_loop  # type: ignore[assignment]
    threads = [threading.Thread(target=target, args=a, daemon=True) for a in args]  # type: ignore[arg-type]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(seconds + 30)
    return tallies


def rates(tallies: list[Tally], start: float, end: float) -> dict[str, float]:
    frames = [f for t in tallies for f in t.frames if start <= f[0] < end]
    span = max(end - start, 1e-9)
    served = sum(1 for f in frames if f[1])
    return {
        "frames_per_s": round(len(frames) / span, 1),
        "goodput_per_s": round(served / span, 1),
        "in_time_fraction": round(served / len(frames), 4) if frames else 0.0,
        "timed_out_fraction": round(sum(1 for f in frames if f[2]) / len(frames), 4) if frames else 0.0,
    }


def _ratio(a: float, b: float) -> float:
    return round(a / b, 3) if b > 0 else 0.0


def measure(args: argparse.Namespace) -> dict:
    # The emulated boards are time-scale times slower than a board, so Frigate's deadline is given in
    # board time too: 200 ms at time scale 4 is 800 ms here (at 1:1 a frame alone would take half of it).
    frigate_s = ZMQ_TIMEOUT_MS / 1000 if args.api == "zmq" else HTTP_TIMEOUT_S
    timeout_s = frigate_s * args.time_scale
    with LocalCluster(
        boards=args.boards,
        time_scale=args.time_scale,
        http_api=args.api == "http",
        zmq_api=args.api == "zmq",
        synthetic_detections=12,
        # The front door's own deadline, as a deployment would set it for these clients.
        scheduler_overrides=(
            {"zmq_api": {"request_timeout_ms": round(timeout_s * 1000)}}
            if args.api == "zmq"
            else {"http_api": {"request_timeout_s": timeout_s}}
        ),
    ) as cluster:
        phase(cluster, args.api, args.patient, 5.0, 2.0)  # warm-up: channels, first frames
        host_before, t0 = host_cpu_busy_s(), time.monotonic()
        patient = phase(cluster, args.api, args.patient, 5.0, args.seconds)
        capacity = rates(patient, t0 + 1.0, t0 + args.seconds)
        t1 = time.monotonic()
        overload = phase(cluster, args.api, args.detectors, timeout_s, args.seconds)
        over = rates(overload, t1 + 1.0, t1 + args.seconds)
        t2 = time.monotonic()
        after = phase(cluster, args.api, args.after, timeout_s, args.seconds)
        host = host_window(host_before, host_cpu_busy_s(), shared=True)
    model = args.boards * sim_npu.throughput_inf_s(sim_npu.CALIBRATED_CONTEXTS, scale=args.time_scale)
    return {
        "conditions": {
            "api": args.api,
            "boards": args.boards,
            "npu": f"EMULATED ({sim_npu.CALIBRATION}), time scale {args.time_scale:g}",
            "model_capacity_inf_per_s": round(model, 1),
            "timeout_s": timeout_s,
            "timeout_is": f"Frigate's {frigate_s * 1000:g} ms x the time scale {args.time_scale:g}",
            "patient_clients": args.patient,
            "overload_clients": args.detectors,
            "after_clients": args.after,
            "seconds_per_phase": args.seconds,
            "host": f"{platform.node()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}",
            "host_cpu": host,
            "python": sys.version.split()[0],
        },
        "capacity": capacity,
        "overload": over,
        "overload_goodput_of_capacity": round(
            over["goodput_per_s"] / max(capacity["goodput_per_s"], 1e-9), 3
        ),
        "after_first_second": rates(after, t2, t2 + 1.0),
        "after_rest": rates(after, t2 + 1.0, t2 + args.seconds),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--api", choices=("zmq", "http"), default="zmq")
    parser.add_argument("--boards", type=int, default=2)
    parser.add_argument("--time-scale", type=float, default=4.0, help="sim time scale (default 4)")
    parser.add_argument("--patient", type=int, default=24, help="patient clients for capacity (default 24)")
    parser.add_argument("--detectors", type=int, default=96, help="Frigate-shaped clients in overload (96)")
    parser.add_argument("--after", type=int, default=8, help="Frigate-shaped clients after (default 8)")
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds per phase (default 10)")
    parser.add_argument("--out", type=Path, default=None, help="also write the figures as JSON here")
    args = parser.parse_args()
    if min(args.boards, args.patient, args.detectors, args.after) < 1 or args.seconds < 3:
        print("frigate_overload: counts must be >= 1 and --seconds >= 3", file=sys.stderr)
        return 2
    figures = measure(args)
    text = json.dumps(figures, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
