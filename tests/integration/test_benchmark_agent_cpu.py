"""Smoke test of benchmarks/agent_cpu.py: real agents and floor servers (plaintext and mutual TLS),
short mode.

No speed is asserted. What is checked: every path carried its frames, the host's other work is
measured and flagged, every stage the agent reports is there on the thread it runs on (the CRL check
on the mutual-TLS agent only), each OK frame was counted once, and the stages add up (the loop
thread's own clock covers the stages that run on it, and all stages fit inside the process's CPU).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "agent_cpu.py"
FRAMES = 60


def test_agent_cpu_benchmark_prints_every_path_and_stage(tmp_path: Path) -> None:
    out = tmp_path / "cpu.json"
    args = ["--frames", str(FRAMES), "--repetitions", "1", "--warmup", "5", "--decode-repeat", "2"]
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args, "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    for label in (
        "floor",
        "agent raw",
        "agent raw mtls",
        "peer_check",
        "agent jpeg",
        "agent jpeg1080",
        "EMULATED NPU",
        "grpcio",
        "letterbox",
        "entropy decode",
        "pool hand-off",
        "JPEG decode hand-off",
        "host during the runs",
    ):
        assert label in done.stdout
    result = json.loads(out.read_text())
    host = result["host"]  # what else the host ran, measured over the windows, not guessed from load
    assert 0 <= host["others_fraction_max"] <= 1 and 0 <= host["steal_fraction_max"] <= 1
    over = (
        host["others_fraction_max"] > host["others_limit"] or host["steal_fraction_max"] > host["steal_limit"]
    )
    assert host["shared"] == over
    assert ("SHARED HOST: the figures carry other work" in done.stdout) == over
    paths = result["paths"]
    assert set(paths) == {
        "floor",
        "agent raw",
        "agent jpeg",
        "agent jpeg1080",
        "floor mtls",
        "agent raw mtls",
    }
    for name, p in paths.items():
        assert p["failures"] == 0 and p["frames"] == FRAMES, name
        assert p["process_cpu_ms_per_frame"] > 0
    for name in ("agent raw", "agent jpeg", "agent jpeg1080", "agent raw mtls"):
        p = paths[name]
        stages = p["stage_cpu_ms_per_frame"]
        assert p["stage_frames"] == FRAMES, name  # every OK frame counted once, nothing else
        for key in ("parse/loop", "check/loop", "npu_input/worker", "reply/loop"):
            assert stages.get(key, 0) > 0, (name, key)
        loop_stages = sum(v for k, v in stages.items() if k.endswith("/loop"))
        assert loop_stages <= p["loop_thread_cpu_ms_per_frame"], name  # the loop clock covers them
        # All stages inside the process's CPU (/proc counts in 10 ms ticks: allow one tick per path).
        assert p["stages_sum_ms"] <= p["process_cpu_ms_per_frame"] + 10 / FRAMES, name
    assert "decode/worker" not in paths["agent raw"]["stage_cpu_ms_per_frame"]  # a view, on the loop
    # The CRL check is a TLS fleet's stage: on the loop there, absent without TLS.
    assert paths["agent raw mtls"]["stage_cpu_ms_per_frame"]["peer_check/loop"] > 0
    assert "peer_check/loop" not in paths["agent raw"]["stage_cpu_ms_per_frame"]
    for name in ("agent jpeg", "agent jpeg1080"):
        assert paths[name]["stage_cpu_ms_per_frame"]["decode/worker"] > 0
    assert paths["agent jpeg1080"]["stage_cpu_ms_per_frame"]["letterbox/worker"] > 0
    decoders = result["decode"]["decoders"]
    assert set(decoders) >= {"pillow", "simplejpeg"}  # OpenCV only where installed
    assert decoders["simplejpeg"]["jpeg1080_scaled_shape"] == [405, 720]  # 3/8, the M/8 covering 640x360
    assert decoders["pillow"]["jpeg1080_scaled_shape"] == [540, 960]  # draft: 1/2
    decode = result["decode"]
    assert decode["jpeg_bytes"]["jpeg1080"] > decode["jpeg_bytes"]["jpeg640"] > 0
    assert min(decode["entropy_floor_ms"].values()) > 0 and decode["jpeg1080_resize_alone_ms"] > 0
    assert decode["jpeg1080_scaled_shape"] == [405, 720]  # the smallest M/8 (3/8) covering 640x360
    assert min(result["handoff_us"].values()) > 0  # the NPU pool's and the decode pool's, CPU and wall
