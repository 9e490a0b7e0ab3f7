"""The dispatcher in-process, with fake boards: reserve/release on every exit path, the bounded queue,
late reservations, retry on another board, and pipeline depth (after Ray Serve's router tests)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import grpc
import pytest

from npudure.config import BoardConfig, SchedulerConfig
from npudure.proto import inference_pb2 as pb
from npudure.scheduler.boards import Board
from npudure.scheduler.dispatch import Dispatcher, DispatchError
from npudure.scheduler.metrics import SchedulerMetrics

FAR = 1e9  # a deadline no test reaches

# Every test is bounded: a leaked reservation shows up as a failure, not a hang.
pytestmark = pytest.mark.timeout(10)


def _reply(board: str) -> bytes:
    return pb.InferResponse(node=board, timing=pb.StageTiming(board_total_us=1000)).SerializeToString()


def rpc_error(code: grpc.StatusCode, details: str = "") -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


class FakeBoard:
    """Scripted answers for one board; records how many calls run at once."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.script: list[Callable[[], object]] = []
        self.calls = 0
        self.running = 0
        self.max_running = 0
        self.release = asyncio.Event()

    def unary_unary(self, _method: str):
        async def call(request: bytes, timeout: float) -> bytes:
            self.calls += 1
            self.running += 1
            self.max_running = max(self.max_running, self.running)
            try:
                action = self.script.pop(0) if self.script else None
                if action == "hang":
                    await asyncio.Event().wait()
                if action == "wait":
                    await self.release.wait()
                if callable(action):  # a step of the test's own, run as the board works
                    action = action()
                if isinstance(action, grpc.aio.AioRpcError):
                    raise action
                await asyncio.sleep(0.002)  # longer than the board time it reports
                return _reply(self.name)
            finally:
                self.running -= 1

        return call


def make_dispatcher(
    n: int, *, max_inflight: int = 8, queue_limit: int = 1024, policy: str = "round_robin"
) -> tuple[Dispatcher, list[Board], list[FakeBoard]]:
    config = SchedulerConfig(
        policy=policy,
        board_max_inflight=max_inflight,
        queue_limit=queue_limit,
        boards=[BoardConfig(name=f"b{i}", address=f"127.0.0.1:{50100 + i}") for i in range(n)],
    )
    fakes = [FakeBoard(f"b{i}") for i in range(n)]
    boards = [
        Board(i, f"b{i}", f"127.0.0.1:{50100 + i}", max_inflight, channels=[fakes[i]]) for i in range(n)
    ]
    return Dispatcher(boards, config, SchedulerMetrics()), boards, fakes


def in_flight(boards: list[Board]) -> list[int]:
    return [b.in_flight for b in boards]


async def test_success_releases_and_reports_one_attempt() -> None:
    d, boards, _ = make_dispatcher(2)
    reply = pb.InferResponse.FromString(await d.forward(b"frame", FAR))
    assert reply.attempts == 1
    assert reply.timing.scheduler_total_us >= reply.timing.board_total_us
    assert in_flight(boards) == [0, 0]
    assert d.served == 1


async def test_board_fault_retries_once_on_another_board_and_counts_against_the_board() -> None:
    d, boards, fakes = make_dispatcher(2)
    # One script shared by both boards: whichever the policy picks first fails, the other serves.
    fakes[0].script = fakes[1].script = [rpc_error(grpc.StatusCode.UNAVAILABLE, "gone")]
    reply = pb.InferResponse.FromString(await d.forward(b"frame", FAR))
    assert reply.attempts == 2
    assert d.retries == 1
    failed = [b for b in boards if b.consecutive_failures == 1]
    assert len(failed) == 1 and failed[0].name != reply.node
    assert in_flight(boards) == [0, 0]


async def test_both_boards_failing_gives_unavailable_and_releases_both() -> None:
    d, boards, fakes = make_dispatcher(2)
    for fake in fakes:
        fake.script = [rpc_error(grpc.StatusCode.UNAVAILABLE, "gone")]
    with pytest.raises(DispatchError) as info:
        await d.forward(b"frame", FAR)
    assert info.value.code == grpc.StatusCode.UNAVAILABLE
    assert [b.failures for b in boards] == [1, 1]
    assert in_flight(boards) == [0, 0]


async def test_request_fault_goes_back_unchanged_without_retry_or_penalty() -> None:
    d, boards, fakes = make_dispatcher(2)
    fakes[0].script = [rpc_error(grpc.StatusCode.INVALID_ARGUMENT, "not a frame")]
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await d.forward(b"junk", FAR)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert fakes[0].calls + fakes[1].calls == 1
    assert d.retries == 0
    assert [b.failures for b in boards] == [0, 0]
    assert in_flight(boards) == [0, 0]


async def test_no_eligible_board_is_unavailable_naming_the_states() -> None:
    d, boards, _ = make_dispatcher(2)
    boards[0].draining = True
    boards[1].down = True
    with pytest.raises(DispatchError) as info:
        await d.forward(b"frame", FAR)
    assert info.value.code == grpc.StatusCode.UNAVAILABLE
    assert "b0=DRAINING" in str(info.value) and "b1=DOWN" in str(info.value)


async def test_pipeline_depth_one_is_never_exceeded_and_waiters_are_served_in_order() -> None:
    d, boards, fakes = make_dispatcher(1, max_inflight=1)
    fakes[0].script = ["wait", "wait", "wait"]
    tasks = [asyncio.create_task(d.forward(b"frame", FAR)) for _ in range(3)]
    await asyncio.sleep(0.01)
    assert d.queue_depth == 2 and boards[0].in_flight == 1
    fakes[0].release.set()
    await asyncio.gather(*tasks)
    assert fakes[0].max_running == 1
    assert in_flight(boards) == [0] and d.queue_depth == 0


async def test_full_queue_is_resource_exhausted() -> None:
    d, boards, fakes = make_dispatcher(1, max_inflight=1, queue_limit=1)
    fakes[0].script = ["wait", "wait"]
    first = asyncio.create_task(d.forward(b"frame", FAR))
    second = asyncio.create_task(d.forward(b"frame", FAR))
    await asyncio.sleep(0.01)
    with pytest.raises(DispatchError) as info:
        await d.forward(b"frame", FAR)
    assert info.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    fakes[0].release.set()
    await asyncio.gather(first, second)
    assert in_flight(boards) == [0]


async def test_waiter_timeout_is_deadline_exceeded_and_leaves_no_reservation() -> None:
    d, boards, fakes = make_dispatcher(1, max_inflight=1)
    fakes[0].script = ["wait"]
    busy = asyncio.create_task(d.forward(b"frame", FAR))
    await asyncio.sleep(0.01)
    with pytest.raises(DispatchError) as info:
        await d.forward(b"frame", time.monotonic() + 0.05)
    assert info.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
    fakes[0].release.set()
    await busy
    assert in_flight(boards) == [0] and d.queue_depth == 0


async def test_late_reservation_for_a_cancelled_waiter_is_released() -> None:
    """Capacity handed to a waiter that gives up in the same instant must go back, not leak."""
    d, boards, _ = make_dispatcher(1, max_inflight=1)
    held = d._try_reserve(frozenset())
    assert held is boards[0]
    waiter = asyncio.create_task(d.forward(b"frame", FAR))
    await asyncio.sleep(0.01)
    assert d.queue_depth == 1
    waiter.cancel()  # the waiter gives up, and before it runs again...
    d.release(held)  # ...the freed board is reserved for it
    assert boards[0].in_flight == 1 and d.queue_depth == 0
    await asyncio.gather(waiter, return_exceptions=True)
    assert in_flight(boards) == [0]


async def test_cancellation_mid_call_releases_the_board() -> None:
    d, boards, fakes = make_dispatcher(2)
    fakes[0].script = ["hang"]
    fakes[1].script = ["hang"]
    task = asyncio.create_task(d.forward(b"frame", FAR))
    await asyncio.sleep(0.01)
    assert sum(in_flight(boards)) == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert in_flight(boards) == [0, 0]
    assert [b.failures for b in boards] == [0, 0]


async def test_in_flight_returns_to_zero_after_a_mixed_storm() -> None:
    d, boards, fakes = make_dispatcher(3, max_inflight=2, queue_limit=4)
    outcomes = ["ok", rpc_error(grpc.StatusCode.UNAVAILABLE), rpc_error(grpc.StatusCode.INVALID_ARGUMENT)]
    for i, fake in enumerate(fakes):
        fake.script = [outcomes[(i + k) % 3] for k in range(20)]
        fake.script = [a if a != "ok" else None for a in fake.script]
    tasks = [asyncio.create_task(d.forward(b"frame", FAR)) for _ in range(30)]
    await asyncio.sleep(0)
    tasks[5].cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    assert in_flight(boards) == [0, 0, 0]
    assert d.queue_depth == 0


async def test_a_deadline_the_caller_set_shorter_than_board_timeout_is_not_the_boards_fault() -> None:
    d, boards, fakes = make_dispatcher(2)
    fakes[0].script = fakes[1].script = [rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, "late")]
    with pytest.raises(DispatchError) as info:
        await d.forward(b"frame", time.monotonic() + 0.025)  # board_timeout_s is 2 s
    assert info.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
    assert "caller's deadline" in str(info.value)
    assert [b.failures for b in boards] == [0, 0] and d.retries == 0
    assert in_flight(boards) == [0, 0]


async def test_a_deadline_the_board_timeout_set_counts_against_the_board() -> None:
    d, boards, fakes = make_dispatcher(2)
    fakes[0].script = fakes[1].script = [rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, "late")]
    reply = pb.InferResponse.FromString(await d.forward(b"frame", FAR))
    assert reply.attempts == 2 and sum(b.failures for b in boards) == 1


async def test_a_board_that_answered_its_health_checks_is_not_faulted_by_a_slow_request() -> None:
    """An expensive frame (a PNG bomb) outlasting board_timeout_s on boards whose health checks say
    SERVING meanwhile is the request's failure: tried once elsewhere (a slow board's requests still get
    served), and counted against neither board."""
    d, boards, fakes = make_dispatcher(2)

    def alive_then_late() -> grpc.aio.AioRpcError:
        for board in boards:
            board.serving_seen_at = time.monotonic()
        return rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, "late")

    fakes[0].script = fakes[1].script = [alive_then_late, alive_then_late]
    with pytest.raises(DispatchError) as info:
        await d.forward(b"frame", FAR)
    assert info.value.code == grpc.StatusCode.DEADLINE_EXCEEDED and "not a board fault" in str(info.value)
    assert [b.failures for b in boards] == [0, 0] and [b.consecutive_failures for b in boards] == [0, 0]
    assert sum(f.calls for f in fakes) == 2 and in_flight(boards) == [0, 0]


async def test_a_request_that_cannot_finish_before_its_deadline_is_not_started() -> None:
    d, boards, fakes = make_dispatcher(1)
    boards[0].ewma_service_s = 0.2  # the board answers in about 200 ms
    with pytest.raises(DispatchError) as info:
        await d.forward(b"frame", time.monotonic() + 0.05)
    assert info.value.code == grpc.StatusCode.DEADLINE_EXCEEDED and "not started" in str(info.value)
    assert fakes[0].calls == 0  # the board did no work for a caller that will have gone
    assert in_flight(boards) == [0] and boards[0].consecutive_failures == 0  # released, no penalty
    await d.forward(b"frame", time.monotonic() + 1.0)  # one that can finish is sent
    assert fakes[0].calls == 1


async def test_the_expected_completion_counts_the_rounds_ahead_on_the_board() -> None:
    _, boards, _ = make_dispatcher(1)
    board = boards[0]
    assert board.expected_completion_s() is None  # nothing measured yet: no request is held back
    board.ewma_service_s, board.in_flight = 0.1, 1
    assert board.expected_completion_s() == pytest.approx(0.1)
    board.in_flight = 3  # parallelism 1 (no status yet): two rounds ahead of this one
    assert board.expected_completion_s() == pytest.approx(0.3)


def test_the_expected_completion_covers_the_spread_of_service_times() -> None:
    """Mean plus twice the mean deviation: with the mean alone a frame started near its deadline
    finished after it as often as not."""
    _, boards, _ = make_dispatcher(1)
    board = boards[0]
    for service_s in (0.1, 0.2, 0.1, 0.2, 0.1, 0.2):
        board.record_success(service_s, alpha=0.5)
    board.in_flight = 1
    assert board.ewma_service_dev_s > 0.02
    assert board.expected_completion_s() == pytest.approx(board.ewma_service_s + 2 * board.ewma_service_dev_s)
    assert board.expected_completion_s() > 0.2  # beyond the slow frames, not the mean's 0.15
