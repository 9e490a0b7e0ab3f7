"""Integration: Frigate's `zmq` detector against a real scheduler and real `sim` agents on loopback.

The client is built as Frigate's plugin is (tests/helpers/frigate.py: REQ socket, multipart request,
timeouts, socket reset). The agents return SYNTHETIC detections (made-up boxes seeded by the pixels the
model gets), so the same picture sent as a raw tensor over zmq and as a PNG over the HTTP API must come
back with the same labels and boxes.
"""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest
import requests
from helpers.deepstack_requests import png
from helpers.fleet_ops import board_states, status
from helpers.frigate import ZEROS, FrigateDetector, assert_rows_match_predictions

from npudure.vision.frames import synthetic_frame
from npudure_workshop.lab.local import LocalCluster

pytestmark = pytest.mark.timeout(180)

SIDE = 320  # Frigate's common model size
PATIENT_MS = 2000  # a timeout no healthy request meets on this host, for the tests of correctness


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(
        boards=2, time_scale=1.0, http_api=True, zmq_api=True, synthetic_detections=12, log_level="INFO"
    ) as running:
        yield running


def _picture(seed: int = 5) -> np.ndarray:
    return synthetic_frame(seed, SIDE)


def _found(rows: np.ndarray) -> np.ndarray:
    return rows[rows[:, 1] > 0]


def test_a_frigate_detector_gets_the_boxes_the_http_api_gives_for_the_same_picture(cluster) -> None:
    picture = _picture()
    with FrigateDetector(cluster.zmq_endpoint, PATIENT_MS) as detector:
        rows = _found(detector.detect_raw(picture[None]))
    answer = requests.post(
        cluster.http_url, files={"image": png(picture)}, data={"min_confidence": "0.01"}, timeout=10
    ).json()
    assert_rows_match_predictions(rows, answer["predictions"], SIDE)


def test_nchw_float_tensors_answer_as_nhwc_uint8_does(cluster) -> None:
    picture = _picture(6)
    nchw_unit = (picture.transpose(2, 0, 1)[None] / 255.0).astype(np.float32)
    with FrigateDetector(cluster.zmq_endpoint, PATIENT_MS) as detector:
        nhwc = detector.detect_raw(picture[None])
        nchw = detector.detect_raw(nchw_unit)
        assert detector.timeouts == 0
    assert len(_found(nhwc)) >= 1
    np.testing.assert_array_equal(nhwc, nchw)


def test_a_model_size_tensor_is_answered_in_its_own_coordinates(cluster) -> None:
    picture = synthetic_frame(7, 640)
    with FrigateDetector(cluster.zmq_endpoint, PATIENT_MS) as detector:
        rows = _found(detector.detect_raw(picture[None]))
    assert len(rows) >= 1
    assert ((rows[:, 2:] >= 0) & (rows[:, 2:] <= 1)).all()


def _header(shape: list[int], dtype: str = "uint8") -> bytes:
    return json.dumps({"shape": shape, "dtype": dtype, "model_type": "yolo-generic"}).encode()


GARBAGE = {
    "not json": [b"\xff{", b"x"],
    "json list": [b"[1, 2, 3]", b"x"],
    "wrong size": [_header([1, SIDE, SIDE, 3]), bytes(100)],
    "wrong dtype": [_header([1, SIDE, SIDE, 3], "int16"), bytes(SIDE * SIDE * 6)],
    "4 channels": [_header([1, SIDE, SIDE, 4]), bytes(SIDE * SIDE * 4)],
    "empty frames": [b"", b""],
    "one frame": [_header([1, SIDE, SIDE, 3])],
    "three frames": [_header([1, 2, 2, 3]), bytes(12), b"more"],
}


def test_garbage_gets_an_answer_and_harms_no_board(cluster) -> None:
    with FrigateDetector(cluster.zmq_endpoint, PATIENT_MS) as detector:
        for name, frames in GARBAGE.items():
            started = time.monotonic()
            answer = detector.send(frames)
            assert detector.timeouts == 0, f"{name}: no reply, the detector would stall"
            assert np.array_equal(answer, ZEROS), name
            assert time.monotonic() - started < 1.0, name
        assert len(_found(detector.detect_raw(_picture()[None]))) >= 1  # it serves on
    assert set(board_states(cluster).values()) == {"UP"}
    log = cluster.logs("scheduler")
    assert "zmq: answered zeros" in log and "Traceback" not in log


def test_the_reply_header_names_the_board_and_its_timing_and_a_refusal_its_code(cluster) -> None:
    """Read as raw frames (Frigate reads the header's shape and dtype only): what `bench --api zmq`
    measures with."""
    import zmq

    context = zmq.Context()
    socket = context.socket(zmq.REQ)
    socket.setsockopt(zmq.RCVTIMEO, PATIENT_MS)
    socket.setsockopt(zmq.LINGER, 0)
    socket.connect(cluster.zmq_endpoint)
    try:
        picture = _picture()[None]
        socket.send_multipart([_header(list(picture.shape)), picture.tobytes()])
        header, rows = socket.recv_multipart()
        answered = json.loads(header)
        assert (answered["shape"], answered["dtype"], answered["code"]) == ([20, 6], "float32", "OK")
        assert answered["node"] in {"board1", "board2"} and answered["attempts"] == 1
        timing = answered["timing"]
        assert timing["scheduler_total_us"] >= timing["board_total_us"] > 0
        assert len(_found(np.frombuffer(rows, np.float32).reshape(20, 6))) >= 1
        socket.send_multipart(GARBAGE["three frames"])
        header, rows = socket.recv_multipart()
        assert json.loads(header)["code"] == "INVALID_ARGUMENT" and not np.frombuffer(rows, np.float32).any()
    finally:
        socket.close(linger=0)
        context.term()


def test_a_100_mb_frame_is_cut_off_and_the_endpoint_serves_on(cluster) -> None:
    big = 100 * 1024 * 1024
    with FrigateDetector(cluster.zmq_endpoint, 1000) as detector:
        answer = detector.send([_header([1, 1, big // 3, 3]), bytes(big - big % 3)])
        assert np.array_equal(answer, ZEROS)
        assert detector.timeouts == 1 and detector.resets == 1  # disconnected unread, as Frigate resets
        assert len(_found(detector.detect_raw(_picture()[None]))) >= 1
    assert set(board_states(cluster).values()) == {"UP"}


def _loop(endpoint: str, timeout_ms: int, seconds: float, out: list[tuple[int, int]]) -> None:
    """One Frigate detector sending back to back: (answered with boxes, timed out)."""
    answered = 0
    with FrigateDetector(endpoint, timeout_ms) as detector:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            answered += len(_found(detector.detect_raw(_picture()[None]))) > 0
        out.append((answered, detector.timeouts))


def _run(endpoint: str, detectors: int, timeout_ms: int, seconds: float) -> tuple[int, int]:
    out: list[tuple[int, int]] = []
    threads = [
        threading.Thread(target=_loop, args=(endpoint, timeout_ms, seconds, out)) for _ in range(detectors)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(seconds + 30)
    assert len(out) == detectors
    return sum(a for a, _ in out), sum(t for _, t in out)


def test_sixteen_detectors_spread_over_both_boards(cluster) -> None:
    before = {b.name: b.served_total for b in status(cluster).boards}
    answered, timeouts = _run(cluster.zmq_endpoint, 16, PATIENT_MS, 3.0)
    after = {b.name: b.served_total for b in status(cluster).boards}
    assert timeouts == 0 and answered > 16
    served = {name: after[name] - before[name] for name in after}
    assert all(n > answered / 8 for n in served.values()), served  # both boards took a share
    assert set(board_states(cluster).values()) == {"UP"}


def test_a_board_killed_under_detectors_costs_at_most_its_frames_in_flight() -> None:
    with LocalCluster(boards=2, time_scale=2.0, zmq_api=True, synthetic_detections=4) as cluster:
        out: list[tuple[int, int]] = []
        threads = [
            threading.Thread(target=_loop, args=(cluster.zmq_endpoint, PATIENT_MS, 4.0, out))
            for _ in range(8)
        ]
        for thread in threads:
            thread.start()
        time.sleep(1.5)
        cluster.kill_agent("board2")
        for thread in threads:
            thread.join(40)
        answered = sum(a for a, _ in out)
        timeouts = sum(t for _, t in out)
        # A frame on board2 when it died is retried on board1 within its deadline: none need be lost,
        # and at most the 8 in flight may be.
        assert timeouts <= 8 and answered > 50, (answered, timeouts)
        assert board_states(cluster)["board1"] == "UP"
