"""A request's frame through the agent's own path: checked at the edge, then decoded and letterboxed to
the model's input (npudure.agent.replies.FrameJob: ``check`` then ``decode_to_input``)."""

from __future__ import annotations

import numpy as np

from npudure.agent.replies import FrameJob
from npudure.vision.frames import INPUT_SIZE


def decode_as_the_agent(
    encoding: int, frame: bytes, size: int = INPUT_SIZE, width: int = 0, height: int = 0
) -> np.ndarray:
    job = FrameJob(encoding, frame, size, width, height)
    job.check()
    return job.decode_to_input()
