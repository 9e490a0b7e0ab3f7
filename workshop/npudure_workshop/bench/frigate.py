"""A client built as Frigate's own `zmq` detector plugin works (frigate/detectors/plugins/zmq_ipc.py):
a REQ socket with send and receive timeouts and a linger, a multipart ``[header_json, tensor]`` request,
a 20 x 6 float32 reply (one frame, or ``[header, tensor]``), and on a timeout or ZMQ error a new socket
and an all-zeros answer. Written from the plugin's documented behaviour, for the tests and the
benchmarks (benchmarks/frigate_overload.py)."""

from __future__ import annotations

import json

import numpy as np
import zmq

ZEROS = np.zeros((20, 6), np.float32)


class FrigateDetector:
    def __init__(self, endpoint: str, request_timeout_ms: int = 200, linger_ms: int = 0) -> None:
        self.endpoint = endpoint
        self.timeout_ms = request_timeout_ms
        self.linger_ms = linger_ms
        self.context = zmq.Context()
        self.socket: zmq.Socket | None = None
        self.timeouts = 0
        self.resets = 0
        self._new_socket()

    def _new_socket(self) -> None:
        if self.socket is not None:
            self.socket.close(linger=self.linger_ms)
            self.resets += 1
        self.socket = self.context.socket(zmq.REQ)
        self.socket.setsockopt(zmq.RCVTIMEO, self.timeout_ms)
        self.socket.setsockopt(zmq.SNDTIMEO, self.timeout_ms)
        self.socket.setsockopt(zmq.LINGER, self.linger_ms)
        self.socket.connect(self.endpoint)

    def detect_raw(self, tensor: np.ndarray, model_type: str = "yolo-generic") -> np.ndarray:
        header = json.dumps(
            {"shape": list(tensor.shape), "dtype": tensor.dtype.name, "model_type": model_type}
        )
        return self.send([header.encode(), memoryview(tensor.tobytes(order="C"))])

    def send(self, frames: list[bytes | memoryview]) -> np.ndarray:
        """Any multipart request (the tests' garbage too), answered as the plugin reads answers."""
        if self.socket is None:
            raise RuntimeError("this detector is closed")
        try:
            self.socket.send_multipart(frames)
            return self._decode(self.socket.recv_multipart())
        except zmq.Again:
            self.timeouts += 1
            self._new_socket()
            return ZEROS
        except zmq.ZMQError:
            self._new_socket()
            return ZEROS

    @staticmethod
    def _decode(frames: list[bytes]) -> np.ndarray:
        if len(frames) == 1:
            if len(frames[0]) != ZEROS.nbytes:
                return ZEROS
            return np.frombuffer(frames[0], np.float32).reshape(20, 6)
        if len(frames) >= 2:
            header = json.loads(frames[0])
            return np.frombuffer(frames[1], np.dtype(header.get("dtype", "float32"))).reshape(header["shape"])
        return ZEROS

    def close(self) -> None:
        if self.socket is not None:
            self.socket.close(linger=self.linger_ms)
            self.socket = None
        self.context.term()

    def __enter__(self) -> FrigateDetector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
