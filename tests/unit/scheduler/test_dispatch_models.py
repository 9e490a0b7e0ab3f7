"""The dispatcher routes by model with fake boards: candidates are the boards that hold the model, an
unknown name is NOT_FOUND with the list, and one model's full boards do not hold back another model's
waiters (release still on every exit path)."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from npudure.config import BoardConfig, SchedulerConfig
from npudure.proto import inference_pb2 as pb
from npudure.scheduler.boards import Board
from npudure.scheduler.dispatch import Dispatcher, DispatchError, model_of
from npudure.scheduler.metrics import SchedulerMetrics

FAR = 1e9
pytestmark = pytest.mark.timeout(10)


class ModelBoard:
    """A board's channel that answers with the model the request named (its default for none)."""

    def __init__(self, name: str, models: tuple[str, ...]) -> None:
        self.name, self.models = name, models
        self.asked: list[str] = []
        self.release = asyncio.Event()
        self.release.set()

    def unary_unary(self, _method: str):
        async def call(request: bytes, timeout: float) -> bytes:
            model = model_of(request) or self.models[0]
            self.asked.append(model)
            await self.release.wait()
            return pb.InferResponse(
                node=self.name, model=model, timing=pb.StageTiming(board_total_us=1000)
            ).SerializeToString()

        return call


def _status(models: tuple[str, ...]) -> pb.NodeStatus:
    return pb.NodeStatus(models=[pb.ModelStatus(name=m, default=i == 0) for i, m in enumerate(models)])


def make(
    placement: dict[str, tuple[str, ...]], max_inflight: int = 8
) -> tuple[Dispatcher, list[Board], dict]:
    names = list(placement)
    config = SchedulerConfig(
        policy="least_inflight",
        board_max_inflight=max_inflight,
        boards=[BoardConfig(name=n, address=f"127.0.0.1:{50200 + i}") for i, n in enumerate(names)],
    )
    fakes = {n: ModelBoard(n, placement[n]) for n in names}
    boards = [
        Board(
            i,
            n,
            f"127.0.0.1:{50200 + i}",
            max_inflight,
            channels=[fakes[n]],
            last_status=_status(placement[n]),
        )
        for i, n in enumerate(names)
    ]
    return Dispatcher(boards, config, SchedulerMetrics()), boards, fakes


def request(model: str = "", i: int = 0) -> bytes:
    return pb.InferRequest(request_id=str(i), frame=b"x", model=model).SerializeToString()


async def test_a_named_model_goes_only_to_boards_that_hold_it() -> None:
    dispatch, _, fakes = make({"a": ("general", "plates"), "b": ("general",), "c": ("plates",)})
    replies = [
        pb.InferResponse.FromString(await dispatch.forward(request("plates", i), FAR)) for i in range(12)
    ]
    assert {r.node for r in replies} == {"a", "c"} and {r.model for r in replies} == {"plates"}
    assert "plates" not in fakes["b"].asked


async def test_no_model_goes_to_boards_whose_default_is_the_clusters() -> None:
    dispatch, _, fakes = make({"a": ("general", "plates"), "b": ("plates",)})
    for i in range(6):
        reply = pb.InferResponse.FromString(await dispatch.forward(request("", i), FAR))
        assert reply.node == "a" and reply.model == "general"
    assert fakes["b"].asked == []


async def test_an_unknown_model_is_not_found_naming_the_served_ones() -> None:
    dispatch, boards, fakes = make({"a": ("general", "plates"), "b": ("faces",)})
    with pytest.raises(DispatchError) as err:
        await dispatch.forward(request("cars"), FAR)
    assert err.value.code == grpc.StatusCode.NOT_FOUND
    assert str(err.value) == "no board serves model 'cars'; models served: general, plates, faces"
    assert all(b.in_flight == 0 for b in boards) and not any(f.asked for f in fakes.values())


async def test_a_model_whose_boards_are_down_is_unavailable_not_sent_elsewhere() -> None:
    dispatch, boards, fakes = make({"a": ("general",), "b": ("plates",)})
    boards[1].down = True
    with pytest.raises(DispatchError) as err:
        await dispatch.forward(request("plates"), FAR)
    assert err.value.code == grpc.StatusCode.UNAVAILABLE and "hold model 'plates'" in str(err.value)
    assert fakes["a"].asked == []


async def test_one_models_full_board_does_not_hold_back_another_models_waiters() -> None:
    dispatch, boards, fakes = make({"a": ("general",), "b": ("plates",)}, max_inflight=1)
    fakes["a"].release.clear()
    busy = asyncio.create_task(dispatch.forward(request("general", 0), FAR))
    waiting = asyncio.create_task(dispatch.forward(request("general", 1), FAR))
    await asyncio.sleep(0.01)
    assert dispatch.queue_depth == 1  # general waits for board a
    plates = pb.InferResponse.FromString(await asyncio.wait_for(dispatch.forward(request("plates"), FAR), 2))
    assert plates.node == "b"
    fakes["a"].release.set()
    assert [pb.InferResponse.FromString(r).node for r in await asyncio.gather(busy, waiting)] == ["a", "a"]
    assert [b.in_flight for b in boards] == [0, 0] and dispatch.queue_depth == 0


async def test_configured_models_stand_in_until_the_board_reports() -> None:
    dispatch, boards, _ = make({"a": ("general",), "b": ("general",)})
    boards[1].last_status = None
    boards[1].configured_models = ("plates",)
    reply = pb.InferResponse.FromString(await dispatch.forward(request("plates"), FAR))
    assert reply.node == "b"
    boards[1].last_status = _status(("general",))  # its own report wins over the config
    with pytest.raises(DispatchError) as err:
        await dispatch.forward(request("plates"), FAR)
    assert err.value.code == grpc.StatusCode.NOT_FOUND


def test_model_of_reads_the_name_and_tolerates_garbage() -> None:
    assert model_of(request("plates")) == "plates"
    assert model_of(b"\x80") == ""  # not an InferRequest: the board refuses it as before


async def test_a_freed_board_goes_to_its_models_oldest_waiter_past_another_models() -> None:
    dispatch, boards, fakes = make({"a": ("general",), "b": ("plates",)}, max_inflight=1)
    fakes["a"].release.clear()
    fakes["b"].release.clear()
    busy = [asyncio.create_task(dispatch.forward(request(m), FAR)) for m in ("general", "plates")]
    await asyncio.sleep(0.01)
    queued = [
        asyncio.create_task(dispatch.forward(request(m, i), FAR)) for i, m in enumerate(("general", "plates"))
    ]
    await asyncio.sleep(0.01)
    assert dispatch.queue_depth == 2  # general first, plates behind it
    fakes["b"].release.set()  # board b frees: the plates waiter is served though general waits ahead
    done = await asyncio.wait_for(queued[1], 2)
    assert pb.InferResponse.FromString(done).node == "b" and not queued[0].done()
    assert dispatch.queue_depth == 1
    fakes["a"].release.set()
    await asyncio.gather(*busy, queued[0])
    assert [b.in_flight for b in boards] == [0, 0] and dispatch.queue_depth == 0


async def test_a_request_that_gave_up_waiting_leaves_nothing_reserved() -> None:
    dispatch, boards, fakes = make({"a": ("general",), "b": ("plates",)}, max_inflight=1)
    fakes["a"].release.clear()
    busy = asyncio.create_task(dispatch.forward(request("general"), FAR))
    await asyncio.sleep(0.01)
    loop = asyncio.get_running_loop()
    with pytest.raises(DispatchError) as err:
        await dispatch.forward(request("general", 1), loop.time() + 0.05)
    assert err.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
    fakes["a"].release.set()
    await busy
    assert boards[0].in_flight == 0 and dispatch.queue_depth == 0
