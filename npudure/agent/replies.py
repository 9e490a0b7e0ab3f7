"""A request's frame on its way through the board, and its detections on the way back: decoded and
letterboxed to the model's input, then boxes mapped back to the sent image's pixels and named."""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from npudure.proto import inference_pb2 as pb
from npudure.vision import frames
from npudure.vision.labels import label


class FrameJob:
    """Decodes one request for a model of input side ``size`` (on a decode thread, via
    :meth:`decode_to_input`) and remembers where the image sat in the input, so :meth:`detections`
    answers in source pixels."""

    def __init__(
        self, encoding: int, frame: bytes | memoryview, size: int, width: int = 0, height: int = 0
    ) -> None:
        self.encoding, self.frame, self.size = encoding, frame, size
        self.width, self.height = width, height  # a raw frame's sides when not the model's (0: its size)
        self.geometry: frames.Letterbox | None = None
        # CPU ns of the decode, split at the end of the pixel decode (cpu_account stages), on the
        # thread that ran it.
        self.cpu_ns: dict[str, int] = {}

    @property
    def on_loop(self) -> bool:
        """A raw frame of the model's size is a view, no work: it is 'decoded' on the event loop."""
        return (
            self.encoding == pb.ENCODING_RAW_RGB
            and self.width in (0, self.size)
            and (self.height in (0, self.size))
        )

    def check(self) -> None:
        """The cheap checks, at the agent's edge (before the frame waits for an NPU core)."""
        frames.check_request_for(self.encoding, self.frame, self.size, self.width, self.height)

    def decode_to_input(self) -> np.ndarray:
        """The request decoded and letterboxed to the model's input (:func:`frames.decode_for_model`),
        its CPU split into the pixel decode and the letterbox."""
        marks: list[int] = []
        start = time.thread_time_ns()
        image, self.geometry = frames.decode_for_model(
            self.encoding, self.frame, self.size, marks, self.width, self.height
        )
        end = time.thread_time_ns()
        decoded = marks[0] if marks else end
        self.cpu_ns = {"decode": decoded - start, "letterbox": end - decoded}
        return image

    def detections(self, detections: np.ndarray, names: Sequence[str]) -> list[pb.Detection]:
        rows = self.geometry.to_source(detections) if self.geometry is not None else detections
        return detections_proto(rows, names)


def detections_proto(detections: np.ndarray, names: Sequence[str]) -> list[pb.Detection]:
    """(N, 6) rows ``x1, y1, x2, y2, score, class_id`` → Detection messages with their labels."""
    return [
        pb.Detection(
            class_id=int(d[5]),
            label=label(names, int(d[5])),
            score=float(d[4]),
            x1=d[0],
            y1=d[1],
            x2=d[2],
            y2=d[3],
        )
        for d in detections.tolist()
    ]
