"""Load generators against a local dummy Inference server: closed-loop concurrency, open-loop schedule."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent import futures
from pathlib import Path
from typing import Any, TypeVar

import grpc
import numpy as np
import pytest

from npudure.proto import inference_pb2 as pb
from npudure_workshop.bench.load import LoadResult, Target, closed_loop, open_loop
from npudure_workshop.bench.payloads import FrameSet, FrameSourceError, build_frame_set, make_frame_set
from npudure_workshop.bench.samples import STAGES, Samples

T = TypeVar("T")


class DummyTarget:
    """Answers Infer after ``delay_s`` and records how many calls were in flight at once."""

    def __init__(self, delay_s: float = 0.0, fail_every: int = 0) -> None:
        self.delay_s = delay_s
        self.fail_every = fail_every
        self.lock = threading.Lock()
        self.in_flight = 0
        self.max_in_flight = 0
        self.calls = 0
        self.server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=64),
            options=[("grpc.max_receive_message_length", 8 * 1024 * 1024)],
        )
        handler = grpc.unary_unary_rpc_method_handler(self._infer)  # raw bytes in and out
        self.server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("npudure.v1.Inference", {"Infer": handler}),)
        )
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.address = f"127.0.0.1:{self.port}"

    def _infer(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        with self.lock:
            self.in_flight += 1
            self.calls += 1
            call = self.calls
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.delay_s:
                time.sleep(self.delay_s)
            if self.fail_every and call % self.fail_every == 0:
                context.abort(grpc.StatusCode.UNAVAILABLE, "dummy failure")
            req = pb.InferRequest.FromString(request)
            return pb.InferResponse(
                request_id=req.request_id,
                node=f"dummy{call % 2}",
                backend="sim",
                emulated=True,
                attempts=1,
                timing=pb.StageTiming(inference_us=1234, board_total_us=2000, scheduler_total_us=2500),
            ).SerializeToString()
        finally:
            with self.lock:
                self.in_flight -= 1


@pytest.fixture
def dummy() -> Iterator[DummyTarget]:
    target = DummyTarget(delay_s=0.02)
    target.server.start()
    yield target
    target.server.stop(grace=None)


@pytest.fixture(scope="module")
def frames() -> FrameSet:
    return make_frame_set("raw", count=2, seed=1)


async def _with_target(address: str, fn: Callable[[Target], Awaitable[T]]) -> T:
    target = Target(address, connections=2)
    async with asyncio.timeout(60):  # a generator that never finishes fails the test, not hangs it
        await target.open()
        try:
            return await fn(target)
        finally:
            await target.close()


async def _closed_loop(address: str, frames: FrameSet, **kwargs: Any) -> LoadResult:
    """closed_loop(**kwargs) of ``frames`` against ``address``, run to the end."""
    return await _with_target(address, lambda t: closed_loop(t, frames.requests, **kwargs))


def test_frames_are_serialized_requests_of_the_right_size(frames: FrameSet) -> None:
    assert len(frames.requests) == 2 and frames.frame_bytes == (1_228_800, 1_228_800)
    req = pb.InferRequest.FromString(frames.requests[0])
    assert req.encoding == pb.ENCODING_RAW_RGB and len(req.frame) == 1_228_800
    assert frames.requests[0] != frames.requests[1]  # distinct frames
    again = make_frame_set("raw", count=2, seed=1)
    assert again.requests == frames.requests  # same seed, same bytes


def test_jpeg_frames_and_user_images(tmp_path: Path) -> None:
    from PIL import Image

    Image.new("RGB", (800, 600), (200, 30, 30)).save(tmp_path / "wide.png")
    Image.new("RGB", (300, 500), (10, 200, 30)).save(tmp_path / "tall.jpg")
    fs = make_frame_set("jpeg", None, 0, tmp_path)
    assert len(fs.requests) == 2 and "images" in fs.source
    for raw in fs.requests:
        req = pb.InferRequest.FromString(raw)
        assert req.encoding == pb.ENCODING_JPEG and req.frame[:2] == b"\xff\xd8"
        from io import BytesIO

        assert Image.open(BytesIO(req.frame)).size == (640, 640)
    with pytest.raises(FrameSourceError, match="no images found"):
        make_frame_set("raw", None, 0, _empty(tmp_path))
    with pytest.raises(FrameSourceError, match="expected H x W x 3 uint8"):
        build_frame_set([np.zeros((10, 10), np.uint8)], "raw", "bad")  # not an RGB frame
    with pytest.raises(FrameSourceError, match="expected H x W x 3 uint8"):
        build_frame_set([np.zeros((10, 10, 3), np.float32)], "raw", "bad")
    # A raw frame of another size than the model's carries its sides (the board letterboxes it).
    small = pb.InferRequest.FromString(
        build_frame_set([np.zeros((48, 64, 3), np.uint8)], "raw", "s").requests[0]
    )
    assert (small.width, small.height, len(small.frame)) == (64, 48, 64 * 48 * 3)


def _empty(tmp_path: Path) -> Path:
    d = tmp_path / "empty"
    d.mkdir()
    return d


async def test_closed_loop_keeps_exactly_c_requests_outstanding(dummy: DummyTarget, frames: FrameSet) -> None:
    result = await _closed_loop(
        dummy.address, frames, concurrency=5, warmup_s=0.2, duration_s=0.8, min_samples=10
    )
    assert dummy.max_in_flight == 5
    s = result.samples
    assert len(s) == dummy.calls
    assert result.window_start_s == 0.2 and result.window_end_s >= 1.0
    # Every send is inside [0, window end): nothing is sent after the window closed.
    assert s.sent_s.max() < result.window_end_s
    measured = s.measured(result.window_start_s, result.window_end_s)
    assert 0 < measured.sum() < len(s)  # warm-up samples exist and are outside the window
    assert np.array_equal(s.intended_s, s.sent_s)  # closed loop: intended = actual
    assert set(s.node_names) == {"dummy0", "dummy1"} and s.emulated.all()
    assert (s.stage_us[:, STAGES.index("inference_us")] == 1234).all()
    assert s.ok.all()


async def test_closed_loop_extends_the_window_until_min_samples(dummy: DummyTarget, frames: FrameSet) -> None:
    result = await _closed_loop(
        dummy.address, frames, concurrency=1, warmup_s=0.0, duration_s=0.1, min_samples=30
    )
    s = result.samples
    ok_measured = (s.measured(result.window_start_s, result.window_end_s) & s.ok).sum()
    assert ok_measured >= 30


async def test_closed_loop_records_errors_with_their_code(frames: FrameSet) -> None:
    flaky = DummyTarget(delay_s=0.005, fail_every=4)
    flaky.server.start()
    try:
        result = await _closed_loop(
            flaky.address, frames, concurrency=2, warmup_s=0.0, duration_s=0.5, min_samples=5
        )
    finally:
        flaky.server.stop(grace=None)
    s = result.samples
    failed = ~s.ok
    assert failed.any() and s.ok.any()
    assert set(s.status_code[failed].tolist()) == {grpc.StatusCode.UNAVAILABLE.value[0]}
    assert (s.node_idx[failed] == -1).all()
    assert any("dummy failure" in k for k in result.error_messages)


async def test_open_loop_sends_on_schedule_and_measures_from_the_intended_time(
    dummy: DummyTarget, frames: FrameSet
) -> None:
    rate, warmup, duration = 100.0, 0.2, 1.0
    result = await _with_target(
        dummy.address,
        lambda t: open_loop(t, frames.requests, rate, warmup, duration, arrival="constant", seed=0),
    )
    s = result.samples
    order = np.argsort(s.intended_s)
    intended = s.intended_s[order]
    # Every scheduled request was sent, at the scheduled times (constant spacing 1/rate).
    assert len(s) == round(rate * (warmup + duration))
    assert intended == pytest.approx(np.arange(len(s)) / rate)
    lag_ms = (s.sent_s - s.intended_s) * 1e3
    assert (lag_ms >= 0).all()  # never early
    # How late the sends were is a figure, not a pass/fail here: it is in the schedule report (and the
    # open-loop table's "send lag p99" column), and it must be the lag of these very samples.
    in_window = s.measured(result.window_start_s, result.window_end_s)
    assert result.schedule["send_lag_p99_ms"] == pytest.approx(np.percentile(lag_ms[in_window], 99))
    # Latency counts from the intended send time, so it includes any send lag.
    assert np.allclose(s.latency_ms, (s.done_s - s.intended_s) * 1e3)
    assert (s.latency_ms >= (s.done_s - s.sent_s) * 1e3 - 1e-9).all()
    assert result.schedule["rate_target_inf_per_s"] == rate
    assert result.schedule["scheduled_in_window"] == round(rate * duration)


async def test_open_loop_flags_a_generator_that_cannot_keep_up(frames: FrameSet) -> None:
    slow = DummyTarget(delay_s=0.05)
    slow.server.start()
    try:
        # One request may be outstanding, each takes 50 ms: 100/s cannot be offered.
        result = await _with_target(
            slow.address,
            lambda t: open_loop(t, frames.requests, 100.0, 0.0, 0.6, arrival="constant", max_outstanding=1),
        )
    finally:
        slow.server.stop(grace=None)
    sched = result.schedule
    assert sched["generator_behind_schedule"] is True
    assert sched["rate_not_offered"] is True
    assert sched["sent_fraction_of_schedule"] < 0.95
    # The wait is charged to latency: the last request's latency far exceeds the 50 ms service time.
    assert result.samples.latency_ms.max() > 200


async def test_an_open_loop_too_slow_for_its_samples_lasts_its_window_and_no_longer(
    dummy: DummyTarget, frames: FrameSet
) -> None:
    # 0.5/s for 100 samples would take ~200 s: the window stops at --max-duration (1 s) with the one
    # request it scheduled, and lasts all of it (the harness CPU and throughput divide by the window).
    started = time.perf_counter()
    result = await _with_target(
        dummy.address,
        lambda t: open_loop(
            t, frames.requests, 0.5, 0.2, 0.3, arrival="constant", min_samples=100, max_duration_s=1.0
        ),
    )
    took = time.perf_counter() - started
    assert result.window_end_s == pytest.approx(1.2)
    assert len(result.samples) == 1 and result.schedule["scheduled_in_window"] == 0
    assert 1.2 <= took < 10, f"the run took {took:.1f} s for a 1.2 s window"
    assert result.cpu_end.wall_s - result.cpu_start.wall_s >= 1.2


async def test_target_that_does_not_answer_is_named() -> None:
    target = Target("127.0.0.1:9", connections=1)  # discard port: nothing listens
    with pytest.raises(ConnectionError, match=r"cannot connect to 127\.0\.0\.1:9"):
        await target.open(ready_timeout_s=0.5)


async def test_samples_survive_a_save_load_round_trip(
    dummy: DummyTarget, frames: FrameSet, tmp_path: Path
) -> None:
    result = await _closed_loop(
        dummy.address, frames, concurrency=2, warmup_s=0.0, duration_s=0.2, min_samples=5
    )
    path = tmp_path / "samples.npz"
    result.samples.save(path)
    back = Samples.load(path)
    for name in (
        "intended_s",
        "sent_s",
        "done_s",
        "status_code",
        "node_idx",
        "attempts",
        "emulated",
        "backend_idx",
        "stage_us",
    ):
        assert np.array_equal(getattr(back, name), getattr(result.samples, name)), name
    assert back.node_names == result.samples.node_names
    assert back.backend_names == result.samples.backend_names
