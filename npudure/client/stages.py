"""The reference's 11 per-request timing stages, and the two only the client can measure.

Nine come back in every response's ``StageTiming`` (the scheduler and the board fill them in). The
last two need the client's own call time: :func:`complete_client_stages` derives them from it, so a
harness that stores every ``StageTiming`` field per request (npudure_workshop.bench.samples) records all 11.
Network time is always a call time minus the callee's own reported total, never a difference of two
machines' clocks.
"""

from __future__ import annotations

from npudure.proto import inference_pb2 as pb

# (StageTiming field, what it is, who measures it), in the order a request lives through them.
STAGES: tuple[tuple[str, str, str], ...] = (
    ("scheduler_queue_us", "waiting for a free board", "scheduler"),
    ("route_us", "choosing the board", "scheduler"),
    ("network_to_board_us", "scheduler's call time minus the board's total", "scheduler"),
    ("board_queue_us", "waiting for a free NPU context", "board"),
    ("decode_us", "frame bytes to an image", "board"),
    ("preprocess_us", "image to the model's input", "board"),
    ("npu_input_us", "handing the input to the NPU", "board"),
    ("inference_us", "the NPU run", "board"),
    ("postprocess_us", "outputs to detections", "board"),
    ("network_to_client_us", "client's call time minus the scheduler's total", "client"),
    ("client_total_us", "end to end, at the client", "client"),
)


def complete_client_stages(timing: pb.StageTiming, call_s: float) -> pb.StageTiming:
    """Fill in the client's two stages from its call time ``call_s`` (send to reply, in seconds)."""
    call_us = max(0, round(call_s * 1e6))
    inside = timing.scheduler_total_us or timing.board_total_us
    timing.client_total_us = call_us
    timing.network_to_client_us = max(0, call_us - inside)
    return timing
