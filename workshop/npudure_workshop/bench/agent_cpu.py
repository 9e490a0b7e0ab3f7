"""The agents' own CPU accounting over a run: per-frame thread CPU by stage (docs/metrics.md).

Read from each board's NodeStatus before and after a run (``stage_cpu``, ``stage_cpu_frames``,
``loop_thread_cpu_s``); the difference over the frames the agent answered in between is what one
frame cost that board's CPU, and how much of it was on the event-loop thread (GIL-serialized).
"""

from __future__ import annotations

from typing import Any

from npudure.proto import inference_pb2 as pb

LOOP = "loop_thread"


def counters(node: pb.NodeStatus | None) -> dict[str, float] | None:
    """A board's cumulative counters (all 0 on a fresh agent, or one older than these fields), None
    without a status."""
    if node is None:
        return None
    out = {f"{s.stage}/{s.thread}": s.seconds for s in node.stage_cpu}
    out["frames"] = float(node.stage_cpu_frames)
    out[LOOP] = node.loop_thread_cpu_s
    return out


def per_frame_ms(before: dict[str, float] | None, after: dict[str, float] | None) -> dict[str, float] | None:
    """CPU-ms per frame by ``stage/thread``, ``loop_thread`` and ``stages`` (their sum) over a run."""
    if before is None or after is None:
        return None
    frames = after["frames"] - before["frames"]
    if frames <= 0:
        return None
    out = {k: (v - before.get(k, 0.0)) * 1e3 / frames for k, v in after.items() if k != "frames"}
    out["stages"] = sum(v for k, v in out.items() if "/" in k)
    return out


def summary_line(ms: dict[str, Any] | None) -> str:
    """``loop thread 1.23 ms, stages 0.45 ms (npu_input/worker 0.20, reply/loop 0.12, ...)``."""
    if not ms:
        return "no stage CPU reported (agent older than this harness, or no frames)"
    top = sorted(((k, v) for k, v in ms.items() if "/" in k and v > 0), key=lambda kv: -kv[1])[:4]
    parts = ", ".join(f"{k} {v:.3f}" for k, v in top)
    return f"event-loop thread {ms.get(LOOP, 0.0):.3f} ms/frame, stages {ms['stages']:.3f} ms/frame ({parts})"
