#!/usr/bin/env python3
"""What a frame costs the agent's CPU, beside the floor of receiving it in Python: prints figures,
asserts nothing (issue #20).

Same run, same client, same frames over real gRPC on loopback:

* ``floor``: a minimal grpc.aio server (its own process) that takes the raw request as bytes and
  answers nothing (an empty reply): what receiving 1.2 MB costs Python here;
* ``agent raw``: a real agent (``sim`` backend, EMULATED NPU, tiny time scale so the NPU is never the
  limit) fed 640x640 raw frames;
* ``agent jpeg``: the same agent fed 640x640 JPEGs; ``agent jpeg1080``: 1920x1080 JPEGs (decoded at
  3/8 scale, 720x405, by libjpeg's DCT scaling, then letterboxed to 640);
* ``floor mtls`` and ``agent raw mtls``: the same floor and a second agent, both requiring mutual TLS
  (a CA and certificates made for the run), fed raw frames: what TLS costs a board, and its
  ``peer_check`` stage, the per-call CRL check of a TLS fleet.

Per path: the server process's CPU (utime + stime from /proc, all threads) divided by frames, and
for the agent the per-stage thread CPU it reports in /metrics (``npudure_agent_stage_cpu_seconds``)
and its event-loop thread's CPU (GIL-serialized). "other" is process CPU not in a named stage
(gRPC's C threads, asyncio, the metrics of the sim). Paths are interleaved over repetitions; the
median per path is printed. The decode section times the JPEG decoders (Pillow with ``draft()``,
simplejpeg, OpenCV if installed) on this thread, with the entropy floor of each JPEG (decoded at
1/8) and the resize alone; then the pool's own per-frame hand-off (a no-op context). Ends by itself;
stops only the processes it started.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/agent_cpu.py --frames 400 --repetitions 3
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import os
import platform
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from npudure.agent.cpu_account import STAGES, THREADS
from npudure.proto import contract
from npudure.proto import inference_pb2 as pb
from npudure.security import pki
from npudure.service.runtime import MALLOC_TUNING
from npudure.vision import frames
from npudure_workshop.bench.cpu import host_cpu_busy_s, host_others, process_cpu_s
from npudure_workshop.bench.fmt import f, text_table
from npudure_workshop.bench.results import write_json
from npudure_workshop.bench.validity import HOST_MAX_STEAL_FRACTION
from npudure_workshop.lab.local import free_port

MAX_MESSAGE = 16 * 1024 * 1024
# Thread-clock reads per OK raw frame: parse 2, check 2, decode 2, reply 2, serialize 2, pool 2, sim 4.
READS_PER_FRAME = 16
PATHS = ("floor", "agent raw", "agent jpeg", "agent jpeg1080", "floor mtls", "agent raw mtls")
AGENT_PATHS = tuple(p for p in PATHS if p.startswith("agent"))
_STAGE_LINE = "npudure_agent_stage_cpu_seconds_total{"
# Other processes' share of the host's CPU in a measured window above which the run is flagged shared.
OTHERS_MAX_FRACTION = 0.10


# ====================================================================== the floor server
async def _floor(port: int, tls_files: list[Path] | None) -> None:
    async def take(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return b""  # the bytes were received; nothing is parsed or answered

    server = grpc.aio.server(options=[("grpc.so_reuseport", 0), *contract.message_size_options(MAX_MESSAGE)])
    handler = grpc.unary_unary_rpc_method_handler(take)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(contract.INFERENCE, {"Infer": handler}),)
    )
    if tls_files is None:
        server.add_insecure_port(f"127.0.0.1:{port}")
    else:  # what the agent's TLS port requires: a client certificate signed by the CA
        ca, cert, key = (p.read_bytes() for p in tls_files)
        credentials = grpc.ssl_server_credentials([(key, cert)], ca, require_client_auth=True)
        server.add_secure_port(f"127.0.0.1:{port}", credentials)
    await server.start()
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await server.stop(0)


# ====================================================================== processes
def _spawn(args: list[str], log: Path) -> subprocess.Popen:
    # Both servers with the agent's malloc settings (it re-execs itself with them otherwise): without
    # them every 1.2 MB frame is an mmap/munmap and ~300 page faults, which would bias the floor.
    env = {**os.environ, **MALLOC_TUNING}
    with log.open("ab") as out:
        return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env)


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


def _wait_port(target: Target, process: subprocess.Popen, timeout_s: float = 60) -> None:
    """Until a connection (and its TLS handshake) to ``target`` succeeds."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server for {target.address} exited with code {process.returncode}")
        with target.channel(grpc) as channel, contextlib.suppress(grpc.FutureTimeoutError):
            grpc.channel_ready_future(channel).result(timeout=1)
            return
    raise TimeoutError(f"the server for {target.address} did not start within {timeout_s:.0f}s")


def _agent_config(workdir: Path, port: int, metrics_port: int, time_scale: float, tls: Tls | None) -> Path:
    import yaml

    config: dict[str, Any] = {
        "node_name": "cpu-bench",
        "listen": f"127.0.0.1:{port}",
        "metrics_port": metrics_port,
        "backend": "sim",
        "npu_cores": 2,
        "queue_limit": 256,
        "sim": {"time_scale": time_scale, "jitter_cv": 0.0},
    }
    if tls is not None:
        config["tls"] = dict(zip(("ca", "cert", "key"), map(str, tls.server_files), strict=True))
    path = workdir / ("agent-mtls.yml" if tls else "agent.yml")
    path.write_text(yaml.safe_dump(config))
    return path


class Tls:
    """A CA made for the run, the servers' certificate (SAN 127.0.0.1) and a client's, with the client's
    gRPC credentials and the SSL context for the agent's /metrics (which asks a TLS agent's scrapers
    for a certificate too)."""

    def __init__(self, directory: Path) -> None:
        pki.make_ca(directory)
        server = pki.issue(directory, "cpu-bench-server", ["127.0.0.1"])
        client = pki.issue(directory, "cpu-bench-client", [], usage="client-only")
        self.server_files = (server.ca, server.cert, server.key)
        self.credentials = grpc.ssl_channel_credentials(
            client.ca.read_bytes(), client.key.read_bytes(), client.cert.read_bytes()
        )
        self.ssl_context = ssl.create_default_context(cafile=str(client.ca))
        self.ssl_context.load_cert_chain(str(client.cert), str(client.key))


# ====================================================================== load and meters
@dataclass(frozen=True)
class Target:
    """One path's server: where to send, whose CPU to read, where its stage counters are."""

    address: str
    pid: int
    metrics_port: int | None = None
    tls: Tls | None = None

    def channel(self, module: Any, **kwargs: Any) -> Any:
        """A channel to the server from ``module`` (``grpc`` or ``grpc.aio``), over TLS where it asks."""
        if self.tls is None:
            return module.insecure_channel(self.address, **kwargs)
        return module.secure_channel(self.address, self.tls.credentials, **kwargs)


async def _drive(target: Target, requests: list[bytes], count: int, concurrency: int) -> int:
    """``count`` calls, ``concurrency`` outstanding, cycling over ``requests``; returns failures."""
    failures = 0
    async with target.channel(grpc.aio, options=contract.message_size_options(MAX_MESSAGE)) as channel:
        call = channel.unary_unary(contract.INFER_METHOD)
        next_i = iter(range(count))

        async def worker() -> None:
            nonlocal failures
            for i in next_i:
                try:
                    await call(requests[i % len(requests)], timeout=30)
                except grpc.aio.AioRpcError:
                    failures += 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return failures


def _scrape(metrics_port: int, tls: Tls | None) -> dict[str, float]:
    """The agent's stage CPU counters, its loop-thread CPU and its frame count."""
    url = f"{'https' if tls else 'http'}://127.0.0.1:{metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10, context=tls.ssl_context if tls else None) as reply:
        text = reply.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(_STAGE_LINE):
            labels, value = line[len(_STAGE_LINE) :].split("} ")
            parts = dict(kv.split("=") for kv in labels.split(","))
            out[f"{parts['stage'].strip(chr(34))}/{parts['thread'].strip(chr(34))}"] = float(value)
        elif line.startswith(
            ("npudure_agent_loop_thread_cpu_seconds_total ", "npudure_agent_stage_cpu_frames_total ")
        ):
            name, value = line.split()
            out[name] = float(value)
    return out


def _measure(target: Target, requests: list[bytes], count: int, concurrency: int) -> dict[str, Any]:
    metrics_port = target.metrics_port
    before = _scrape(metrics_port, target.tls) if metrics_port else {}
    host0, own0 = host_cpu_busy_s(), time.process_time()
    cpu0, wall0 = process_cpu_s(target.pid) or 0.0, time.perf_counter()
    failures = asyncio.run(_drive(target, requests, count, concurrency))
    cpu1, wall1 = process_cpu_s(target.pid) or 0.0, time.perf_counter()
    own_s = (cpu1 - cpu0) + (time.process_time() - own0)  # the server and this client
    host = host_others(host0, host_cpu_busy_s(), own_s)
    after = _scrape(metrics_port, target.tls) if metrics_port else {}
    frames_ok = count - failures
    row: dict[str, Any] = {
        "frames": count,
        "failures": failures,
        "wall_s": wall1 - wall0,
        "fps": count / (wall1 - wall0),
        "process_cpu_ms_per_frame": (cpu1 - cpu0) * 1e3 / max(frames_ok, 1),
    }
    if host is not None:
        row.update(host)
    if metrics_port:
        n = max(
            after.get("npudure_agent_stage_cpu_frames_total", 0)
            - before.get("npudure_agent_stage_cpu_frames_total", 0),
            1,
        )
        stages = {k: (after[k] - before.get(k, 0.0)) * 1e3 / n for k in after if "/" in k}
        row["stage_cpu_ms_per_frame"] = {k: v for k, v in stages.items() if v > 0}
        loop = "npudure_agent_loop_thread_cpu_seconds_total"
        row["loop_thread_cpu_ms_per_frame"] = (after.get(loop, 0) - before.get(loop, 0)) * 1e3 / n
        row["stage_frames"] = n
        row["stages_sum_ms"] = sum(stages.values())
        row["other_ms"] = row["process_cpu_ms_per_frame"] - row["stages_sum_ms"]
    return row


# ====================================================================== decode section (this thread)
def _thread_ms(fn: Any, repeat: int) -> float:
    fn()
    start = time.thread_time()
    for _ in range(repeat):
        fn()
    return (time.thread_time() - start) * 1e3 / repeat


def _decoders() -> dict[str, Any]:
    """Each JPEG decoder here, as ``decode(data, min_w, min_h) -> (h, w, 3) RGB`` at its DCT scale
    nearest above (min_w, min_h): Pillow (``draft``: 1/1, 1/2, 1/4, 1/8), simplejpeg (what the agent
    uses: any M/8) and OpenCV when installed (``IMREAD_REDUCED_COLOR_2/4/8``; comparison only, not a
    dependency)."""
    import numpy as np
    import simplejpeg
    from PIL import Image

    def pillow(data: bytes, min_w: int, min_h: int) -> Any:
        with Image.open(io.BytesIO(data)) as image:
            image.draft("RGB", (min_w, min_h))
            return np.asarray(image.convert("RGB"))

    def turbo(data: bytes, min_w: int, min_h: int) -> Any:
        return simplejpeg.decode_jpeg(data, "RGB", min_height=min_h, min_width=min_w)

    out: dict[str, Any] = {"pillow": pillow, "simplejpeg": turbo}
    try:
        import cv2
    except ImportError:
        return out
    cv2.setNumThreads(1)
    reduced = {1: cv2.IMREAD_COLOR, 2: cv2.IMREAD_REDUCED_COLOR_2, 4: cv2.IMREAD_REDUCED_COLOR_4}

    def opencv(data: bytes, min_w: int, min_h: int) -> Any:
        w, h = simplejpeg.decode_jpeg_header(data)[1::-1]
        factor = max((f for f in reduced if w // f >= min_w and h // f >= min_h), default=1)
        bgr = cv2.imdecode(np.frombuffer(data, np.uint8), reduced[factor])
        return bgr[:, :, ::-1]  # a view: OpenCV decodes to BGR

    out[f"opencv {cv2.__version__}"] = opencv
    return out


def decode_section(jpeg640: bytes, jpeg1080: bytes, repeat: int) -> dict[str, Any]:
    """On this thread: the agent's decode + letterbox (``decode_for_model``), and each decoder's pixel
    decode alone, 640x640 at full scale and 1080p at the scale covering a 640x360 letterbox, then the
    same decode followed by Pillow's bilinear resize to 640x360."""
    from PIL import Image

    def resized(decode: Any) -> None:
        rgb = decode(jpeg1080, 640, 360)
        Image.fromarray(rgb).resize((640, 360), Image.Resampling.BILINEAR)

    decoders: dict[str, dict[str, float]] = {}
    for name, decode in _decoders().items():
        decoders[name] = {
            "jpeg640_ms": _thread_ms(lambda d=decode: d(jpeg640, 640, 640), repeat),
            "jpeg1080_scaled_ms": _thread_ms(lambda d=decode: d(jpeg1080, 640, 360), repeat),
            "jpeg1080_scaled_resized_ms": _thread_ms(lambda d=decode: resized(d), repeat),
            "jpeg1080_scaled_shape": list(decode(jpeg1080, 640, 360).shape[:2]),
        }
    import simplejpeg

    scaled = simplejpeg.decode_jpeg(jpeg1080, "RGB", min_height=360, min_width=640)
    image = Image.fromarray(scaled)
    return {
        # Decoded at 1/8 (DC coefficients only, no full IDCT): mostly the entropy (Huffman) decode of
        # the whole file, which no DCT scale avoids. It grows with the file's bytes, not the output's.
        "entropy_floor_ms": {
            "jpeg640": _thread_ms(
                lambda: simplejpeg.decode_jpeg(jpeg640, "RGB", min_height=80, min_width=80), repeat
            ),
            "jpeg1080": _thread_ms(
                lambda: simplejpeg.decode_jpeg(jpeg1080, "RGB", min_height=135, min_width=240), repeat
            ),
        },
        "jpeg_bytes": {"jpeg640": len(jpeg640), "jpeg1080": len(jpeg1080)},
        "jpeg1080_resize_alone_ms": _thread_ms(
            lambda: image.resize((640, 360), Image.Resampling.BILINEAR), repeat
        ),
        "jpeg1080_scaled_shape": list(scaled.shape[:2]),
        "jpeg640_decode_for_model_ms": _thread_ms(
            lambda: frames.decode_for_model(pb.ENCODING_JPEG, jpeg640), repeat
        ),
        "jpeg1080_decode_for_model_ms": _thread_ms(
            lambda: frames.decode_for_model(pb.ENCODING_JPEG, jpeg1080), repeat
        ),
        "decoders": decoders,
    }


# ====================================================================== conditions and report
def conditions(time_scale: float, concurrency: int) -> dict[str, Any]:
    import numpy
    import PIL

    load1, load5, _ = os.getloadavg()
    cores = os.cpu_count() or 0
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    return {
        "host": platform.node(),
        "cpu": model,
        "cores": cores,
        "usable_cores": len(os.sched_getaffinity(0)),
        "load_1m_5m_before": [round(load1, 2), round(load5, 2)],
        "shared_host_warning": load1 > 0.5 * cores,
        "python": platform.python_version(),
        "grpcio": grpc.__version__,
        "numpy": numpy.__version__,
        "pillow": PIL.__version__,
        "simplejpeg": __import__("simplejpeg").__version__,
        "backend": f"sim (EMULATED NPU, time_scale {time_scale}, 2 slots)",
        "client": f"grpc.aio in the benchmark's own process, {concurrency} outstanding, loopback",
    }


def _median_rows(rows: list[dict[str, Any]]) -> dict[str, Any]:
    med: dict[str, Any] = {"repetitions": len(rows)}
    for key in (
        "process_cpu_ms_per_frame",
        "loop_thread_cpu_ms_per_frame",
        "stages_sum_ms",
        "other_ms",
        "fps",
    ):
        values = [r[key] for r in rows if key in r]
        if values:
            med[key] = statistics.median(values)
    med["process_cpu_ms_per_frame_all"] = [round(r["process_cpu_ms_per_frame"], 3) for r in rows]
    stage_keys = sorted({k for r in rows for k in r.get("stage_cpu_ms_per_frame", {})})
    if stage_keys:
        med["stage_cpu_ms_per_frame"] = {
            k: statistics.median(r.get("stage_cpu_ms_per_frame", {}).get(k, 0.0) for r in rows)
            for k in stage_keys
        }
    med["failures"] = sum(r["failures"] for r in rows)
    med["frames"] = sum(r["frames"] for r in rows)
    if all("stage_frames" in r for r in rows):
        med["stage_frames"] = sum(r["stage_frames"] for r in rows)
    return med


def host_summary(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The worst window of the measured runs: how much CPU other processes took and the hypervisor
    stole. Either over its limit means the figures carry someone else's work (shared caches, a
    stolen core's wake-ups): they are flagged, not dropped."""
    others = [r["others_fraction"] for r in rows if "others_fraction" in r]
    steal = [r["steal_fraction"] for r in rows if "steal_fraction" in r]
    if not others:
        return None
    return {
        "others_fraction_max": max(others),
        "steal_fraction_max": max(steal),
        "others_limit": OTHERS_MAX_FRACTION,
        "steal_limit": HOST_MAX_STEAL_FRACTION,
        "shared": max(others) > OTHERS_MAX_FRACTION or max(steal) > HOST_MAX_STEAL_FRACTION,
    }


def _host_lines(host: dict[str, Any] | None) -> list[str]:
    if host is None:
        return ["host during the runs: unknown (no /proc/stat)"]
    line = (
        f"host during the runs (worst window): other processes took {host['others_fraction_max']:.1%} "
        f"of its CPU (limit {host['others_limit']:.0%}), the hypervisor stole "
        f"{host['steal_fraction_max']:.1%} (limit {host['steal_limit']:.0%})"
    )
    if host["shared"]:
        line += " — SHARED HOST: the figures carry other work; compare ratios within this run only"
    return [line]


def _floor_of(path: str) -> str:
    """The floor a path is set against: the one on its own transport."""
    return "floor mtls" if path.endswith("mtls") else "floor"


def report(result: dict[str, Any]) -> list[str]:
    c = result["conditions"]
    paths = result["paths"]
    lines = [
        "Agent CPU per frame (issue #20) — server process CPU (/proc utime+stime) / frames",
        f"conditions: host {c['host']} ({c['cpu']}, {c['cores']} cores), load {c['load_1m_5m_before']} before"
        + (" — SHARED HOST: other work ran beside this run" if c["shared_host_warning"] else "")
        + f"; python {c['python']}, grpcio {c['grpcio']}, numpy {c['numpy']}, Pillow {c['pillow']}, "
        + f"simplejpeg {c.get('simplejpeg', '?')}; "
        f"backend {c['backend']}; client {c['client']}",
        *_host_lines(result.get("host")),
        "",
    ]
    rows = []
    for name in PATHS:
        p = paths.get(name)
        if not p:
            continue
        cpu = p["process_cpu_ms_per_frame"]
        floor = paths[_floor_of(name)]["process_cpu_ms_per_frame"]
        rows.append(
            [
                name,
                f(cpu, ".3f"),
                f(cpu / floor, ".2f", "×"),
                f(p.get("loop_thread_cpu_ms_per_frame"), ".3f"),
                f(p.get("stages_sum_ms"), ".3f"),
                f(p.get("other_ms"), ".3f"),
            ]
        )
    lines += text_table(
        ["path", "CPU-ms/frame", "× floor", "loop thread", "in stages", "other"], rows, align="lr"
    )
    lines.append("(× floor: against the floor on the same transport, plaintext or mutual TLS)")
    lines += [
        "",
        "per-stage thread CPU, ms per frame (loop = event-loop thread, GIL-serialized; "
        "worker = decode/NPU threads):",
    ]
    measured = [name for name in AGENT_PATHS if name in paths]
    rows = []
    for stage in STAGES:
        cells = []
        for name in measured:
            st = paths[name].get("stage_cpu_ms_per_frame", {})
            cells += [st.get(f"{stage}/{t}", 0.0) for t in THREADS]
        if any(cells):
            rows.append([stage, *(f(v, ".4f") for v in cells)])
    header = ["stage", *(f"{name[6:]} {t}" for name in measured for t in THREADS)]
    lines += text_table(header, rows, align="lr")
    d = result.get("decode")
    if d:
        lines += [
            "",
            "decode on one thread (thread CPU, ms): 640 JPEG → model input "
            f"{d['jpeg640_decode_for_model_ms']:.2f}; 1080p JPEG → letterboxed 640 "
            f"{d['jpeg1080_decode_for_model_ms']:.2f} "
            f"(= {d['jpeg1080_decode_for_model_ms'] / d['jpeg640_decode_for_model_ms']:.2f}× the 640's); "
            "the pixel decode alone, by decoder:",
        ]
        for name, row in d["decoders"].items():
            h, w = row["jpeg1080_scaled_shape"]
            lines.append(
                f"  {name:<18} 640 JPEG {row['jpeg640_ms']:.2f}; 1080p at {w}x{h} "
                f"{row['jpeg1080_scaled_ms']:.2f}, + Pillow resize to 640x360 "
                f"{row['jpeg1080_scaled_resized_ms']:.2f}"
            )
        e, b = d["entropy_floor_ms"], d["jpeg_bytes"]
        h, w = d["jpeg1080_scaled_shape"]
        lines += [
            f"  the 1080p JPEG is {b['jpeg1080'] / 1e3:.0f} kB, the 640's {b['jpeg640'] / 1e3:.0f} kB "
            f"({b['jpeg1080'] / b['jpeg640']:.2f}×); decoded at 1/8 (mostly the entropy decode, which no "
            f"DCT scale avoids) {e['jpeg1080']:.2f} vs {e['jpeg640']:.2f} ms "
            f"({e['jpeg1080'] / e['jpeg640']:.2f}×); Pillow's bilinear {w}x{h} → 640x360 alone "
            f"{d['jpeg1080_resize_alone_ms']:.2f} ms",
        ]
    hand = result.get("handoff_us")
    if hand:
        lines.append(
            "pool hand-off (WorkerPool.run of a no-op context: free-list wait, to its thread and back, "
            f"release), whole process CPU {hand['cpu_us']:.1f} µs per frame, wall {hand['wall_us']:.1f} µs; "
            f"JPEG decode hand-off (DecodePool.run of a no-op decode) {hand['decode_cpu_us']:.1f} µs, "
            f"wall {hand['decode_wall_us']:.1f} µs"
        )
    us = result["clock_read_us"]
    lines.append(
        f"accounting overhead: one thread-clock read costs {us:.3f} µs CPU here; {READS_PER_FRAME} reads "
        f"per raw frame (+1 for JPEG) = {us * READS_PER_FRAME / 1e3:.4f} ms per frame"
    )
    return lines


def _clock_read_us() -> float:
    """CPU cost of one thread-clock read (a syscall where the vDSO does not serve CLOCK_THREAD_CPUTIME_ID)."""
    n = 100_000
    start = time.thread_time()
    for _ in range(n):
        time.thread_time_ns()
    return (time.thread_time() - start) * 1e6 / n


def _requests() -> dict[str, list[bytes]]:
    from PIL import Image

    raw, jpeg, big = [], [], []
    for seed in range(4):
        image = frames.synthetic_frame(seed)
        raw.append(
            pb.InferRequest(
                request_id=f"r{seed}", encoding=pb.ENCODING_RAW_RGB, frame=image.tobytes()
            ).SerializeToString()
        )
        jpeg.append(
            pb.InferRequest(
                request_id=f"j{seed}", encoding=pb.ENCODING_JPEG, frame=frames.encode_jpeg(image)
            ).SerializeToString()
        )
        wide = Image.fromarray(frames.synthetic_frame(100 + seed, 1080)).resize(
            (1920, 1080), Image.Resampling.BILINEAR
        )
        big.append(
            pb.InferRequest(
                request_id=f"b{seed}",
                encoding=pb.ENCODING_JPEG,
                frame=frames.encode_jpeg(__import__("numpy").asarray(wide)),
            ).SerializeToString()
        )
    return {
        "floor": raw,
        "agent raw": raw,
        "agent jpeg": jpeg,
        "agent jpeg1080": big,
        "floor mtls": raw,
        "agent raw mtls": raw,
    }


def _start_floor(workdir: Path, tls: Tls | None, procs: list[subprocess.Popen]) -> Target:
    port = free_port()
    args = [sys.executable, __file__, "--serve-floor", str(port)]
    if tls:
        args += ["--floor-tls", *map(str, tls.server_files)]
    process = _spawn(args, workdir / f"floor{'-mtls' if tls else ''}.log")
    procs.append(process)
    target = Target(f"127.0.0.1:{port}", process.pid, tls=tls)
    _wait_port(target, process)
    return target


def _start_agent(workdir: Path, time_scale: float, tls: Tls | None, procs: list[subprocess.Popen]) -> Target:
    port, metrics_port = free_port(), free_port()
    config = _agent_config(workdir, port, metrics_port, time_scale, tls)
    process = _spawn(
        [sys.executable, "-m", "npudure", "agent", "--config", str(config), "--log-level", "WARNING"],
        workdir / f"{config.stem}.log",
    )
    procs.append(process)
    target = Target(f"127.0.0.1:{port}", process.pid, metrics_port, tls)
    _wait_port(target, process)
    return target


def run(args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {"conditions": conditions(args.time_scale, args.concurrency)}
    requests = _requests()
    procs: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory(prefix="npudure-agent-cpu-") as tmp:
        workdir = Path(tmp)
        try:
            tls = Tls(workdir / "tls")
            plain = _start_agent(workdir, args.time_scale, None, procs)
            secure = _start_agent(workdir, args.time_scale, tls, procs)
            targets = {
                "floor": _start_floor(workdir, None, procs),
                "agent raw": plain,
                "agent jpeg": plain,
                "agent jpeg1080": plain,
                "floor mtls": _start_floor(workdir, tls, procs),
                "agent raw mtls": secure,
            }
            for name, target in targets.items():  # warm-up: connections, handshakes, allocators, caches
                asyncio.run(_drive(target, requests[name], args.warmup, args.concurrency))
            rows: dict[str, list[dict[str, Any]]] = {p: [] for p in PATHS}
            for rep in range(args.repetitions):
                order = PATHS if rep % 2 == 0 else PATHS[::-1]
                for name in order:
                    rows[name].append(_measure(targets[name], requests[name], args.frames, args.concurrency))
            result["paths"] = {p: _median_rows(r) for p, r in rows.items()}
            result["host"] = host_summary([row for path in rows.values() for row in path])
        finally:
            for process in procs:
                _stop(process)
    jpeg640 = pb.InferRequest.FromString(requests["agent jpeg"][0]).frame
    jpeg1080 = pb.InferRequest.FromString(requests["agent jpeg1080"][0]).frame
    result["decode"] = decode_section(jpeg640, jpeg1080, args.decode_repeat)
    result["clock_read_us"] = _clock_read_us()
    result["handoff_us"] = asyncio.run(_handoff_us(args.decode_repeat * 100))
    return result


async def _handoff_us(count: int) -> dict[str, float]:
    """The agent's own hand-offs per frame, the NPU and the decode taken out, one frame at a time,
    process CPU (every thread) and wall: ``WorkerPool.run`` of a context that returns at once, and
    ``DecodePool.run`` of a JPEG whose decode returns at once."""
    import numpy as np

    from npudure.agent.decode_pool import DecodePool
    from npudure.agent.pool import WorkerPool
    from npudure.backends.base import Context, ContextResult

    image = np.zeros((1, 1, 3), np.uint8)
    reply = ContextResult(np.zeros((0, 6), np.float32), 0.0, 0.0, 0.0)

    class Instant(Context):
        def run(self, image: np.ndarray) -> ContextResult:
            return reply

    async def per_frame(call: Callable[[], Awaitable[object]]) -> tuple[float, float]:
        for _ in range(100):
            await call()
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(count):
            await call()
        return (time.process_time() - cpu) * 1e6 / count, (time.perf_counter() - wall) * 1e6 / count

    pool, decoder = WorkerPool([Instant()], queue_limit=4), DecodePool(threads=2, queue_limit=4)
    try:
        cpu_us, wall_us = await per_frame(lambda: pool.run(image))
        jpeg_cpu_us, jpeg_wall_us = await per_frame(lambda: decoder.run(pb.ENCODING_JPEG, lambda: image))
    finally:
        pool.close()
        decoder.close()
    return {
        "cpu_us": cpu_us,
        "wall_us": wall_us,
        "decode_cpu_us": jpeg_cpu_us,
        "decode_wall_us": jpeg_wall_us,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=400, help="frames per path per repetition")
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=40)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument(
        "--time-scale", type=float, default=0.01, help="sim service-time scale (0.01: 100× a board)"
    )
    parser.add_argument("--decode-repeat", type=int, default=30)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--serve-floor", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--floor-tls", type=Path, nargs=3, help=argparse.SUPPRESS)  # CA, cert, key
    args = parser.parse_args(argv)
    # SIGTERM ends the run through its finally blocks: the servers it started are stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.serve_floor:
        asyncio.run(_floor(args.serve_floor, args.floor_tls))
        return 0
    if min(args.frames, args.repetitions, args.concurrency) < 1 or args.warmup < 0:
        parser.error("--frames, --repetitions and --concurrency must be at least 1")
    result = run(args)
    print("\n".join(report(result)))
    if args.json:
        write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
