"""The fault suite's proxyless mode: its verdict on a scheduler restart, and its load through the route.

The arithmetic uses a made-up timeline; the load test runs the suite's own BackgroundLoad in proxyless
mode over a loopback cluster while the scheduler restarts (real processes).
"""

from __future__ import annotations

import time

import grpc
import numpy as np

from npudure.proto import inference_pb2 as pb
from npudure_workshop.bench.samples import from_raw
from npudure_workshop.faults.analysis import Timeline, analyse_board_fault, analyse_scheduler_restart
from npudure_workshop.faults.background import BackgroundLoad, Poll
from npudure_workshop.lab.local import LocalCluster

UNAVAILABLE = grpc.StatusCode.UNAVAILABLE.value[0]
BOARDS = ["board1", "board2", "board3"]
UP3 = dict.fromkeys(BOARDS, "UP")


def _restart_record(failed: int):
    rows = [(t / 10, t / 10 + 0.1, 0, BOARDS[t % 3]) for t in range(10, 100)]
    rows += [(5.0 + i * 0.05, 5.01 + i * 0.05, UNAVAILABLE, None) for i in range(failed)]
    responses = [pb.InferResponse(node=n, attempts=1).SerializeToString() if n else None for *_, n in rows]
    sent = [r[0] for r in rows]
    samples = from_raw(sent, sent, [r[1] for r in rows], [r[2] for r in rows], responses)
    polls = [Poll(5.1, None, {}), Poll(7.3, UP3, {})]
    return samples, polls, Timeline(1.0, 5.0, 6.0, None, 10.0)


def test_proxyless_mode_fails_a_scheduler_restart_that_cost_requests() -> None:
    samples, polls, tl = _restart_record(failed=5)
    assert analyse_scheduler_restart(BOARDS, samples, polls, tl).passed  # central: UNAVAILABLE expected
    strict = analyse_scheduler_restart(BOARDS, samples, polls, tl, lossless=True)
    assert not strict.passed and any("proxyless" in w for w in strict.why)
    samples, polls, tl = _restart_record(failed=0)
    assert analyse_scheduler_restart(BOARDS, samples, polls, tl, lossless=True).passed


def test_background_load_in_proxyless_mode_rides_out_a_scheduler_restart() -> None:
    frame = pb.InferRequest(
        encoding=pb.ENCODING_RAW_RGB, frame=np.zeros((640, 640, 3), np.uint8).tobytes()
    ).SerializeToString()
    with LocalCluster(boards=2, time_scale=3.0) as cluster:
        t0 = time.perf_counter()
        load = BackgroundLoad(cluster.address, [frame], 6, 0.5, 4.0, t0, mode="proxyless")
        load.start()
        time.sleep(1.5)
        cluster.restart_scheduler()
        result = load.join()
    samples = result.samples
    assert len(samples) > 0
    assert int((samples.status_code != 0).sum()) == 0, result.error_messages
    assert set(samples.node_names) >= {"board1", "board2"}


def test_proxyless_board_faults_are_judged_on_the_clients_requests() -> None:
    rows = [(t / 10, t / 10 + 0.1, 0, BOARDS[t % 3]) for t in range(10, 120)]
    responses = [pb.InferResponse(node=n, attempts=1).SerializeToString() for *_, n in rows]
    sent = [r[0] for r in rows]
    samples = from_raw(sent, sent, [r[1] for r in rows], [r[2] for r in rows], responses)
    polls = [Poll(t / 10, UP3, {}) for t in range(120)]  # the scheduler never saw the board go
    tl = Timeline(1.0, 5.0, 5.0, 8.0, 12.0)
    central = analyse_board_fault("link-cut", "board3", True, samples, polls, tl)
    assert not central.passed and any("scheduler never took" in w for w in central.why)
    assert analyse_board_fault("link-cut", "board3", True, samples, polls, tl, proxyless=True).passed
