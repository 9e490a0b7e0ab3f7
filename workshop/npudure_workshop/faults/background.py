"""What runs beside the fault driver: the harness's closed-loop load and a ~100 ms cluster-status poll.

Both run on their own threads and stamp times as seconds since the same ``t0`` (``time.perf_counter``),
so a request, a board state and an injected fault can be put on one timeline afterwards.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import grpc

from npudure.client.proxyless import ProxylessTarget
from npudure.proto import inference_pb2 as pb
from npudure.proto import inference_pb2_grpc as rpc
from npudure.security import access as security
from npudure_workshop.bench.load import LoadResult, Target, closed_loop
from npudure_workshop.faults.fleet import RECONNECT_OPTIONS

REQUEST_TIMEOUT_S = 15.0
POLL_INTERVAL_S = 0.1
POLL_TIMEOUT_S = 1.0


@dataclass(eq=False)  # eq=False: compared and hashed by identity, as a thread's owner should be
class BackgroundLoad:
    """``npudure_workshop.bench.load.closed_loop`` on its own thread and event loop, for a fixed span."""

    address: str
    requests: Sequence[bytes]
    concurrency: int
    warmup_s: float
    duration_s: float
    t0: float
    connections: int = 2
    timeout_s: float = REQUEST_TIMEOUT_S
    # "scheduler": every request through the scheduler; "proxyless": straight to the boards on the
    # scheduler's route (npudure.client.proxyless), the scheduler only answering GetRoute.
    mode: str = "scheduler"
    # Set to end the window before ``duration_s`` (an operator scenario ends with its playbook).
    stop: threading.Event | None = None
    result: LoadResult | None = field(default=None, init=False)
    error: BaseException | None = field(default=None, init=False)
    _thread: threading.Thread = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._thread = threading.Thread(target=self._run, name="faults-load", daemon=True)

    @property
    def end_s(self) -> float:
        return self.warmup_s + self.duration_s

    def start(self) -> None:
        self._thread.start()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        try:
            self.result = asyncio.run(self._main())
        except BaseException as exc:  # reported by join(); the thread must not die silently
            self.error = exc

    async def _main(self) -> LoadResult:
        # Both carry a short reconnect backoff: the central clients' (npudure.client.central), and the
        # proxyless route's own.
        target: Target | ProxylessTarget = (
            ProxylessTarget(self.address)
            if self.mode == "proxyless"
            else Target(self.address, self.connections)
        )
        await target.open()
        try:
            return await closed_loop(
                target,
                self.requests,
                self.concurrency,
                warmup_s=self.warmup_s,
                duration_s=self.duration_s,
                min_samples=0,
                max_duration_s=self.duration_s + 5.0,
                timeout_s=self.timeout_s,
                t0=self.t0,
                stop_when=self.stop.is_set if self.stop is not None else None,
            )
        finally:
            await target.close()

    def join(self) -> LoadResult:
        """Wait for the load to end (bounded: its span, plus one request timeout, plus slack)."""
        left = self.t0 + self.end_s + 5.0 + self.timeout_s + 30.0 - time.perf_counter()
        self._thread.join(max(1.0, left))
        if self._thread.is_alive():
            raise TimeoutError(f"the load generator did not stop within {left:.0f} s of its planned end")
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


@dataclass(frozen=True)
class Poll:
    t_s: float
    # board -> UP/DOWN/DRAINING/HOT/INACTIVE; None when the scheduler did not answer.
    states: dict[str, str] | None
    served: dict[str, int] = field(default_factory=dict)
    error: str = ""


def state_name(state: int) -> str:
    return pb.BoardState.Name(state).removeprefix("BOARD_STATE_")


class StatusPoller:
    """GetClusterStatus every ~100 ms into a list of ``Poll``s."""

    def __init__(self, address: str, t0: float, interval_s: float = POLL_INTERVAL_S) -> None:
        self.address = address
        self.t0 = t0
        self.interval_s = interval_s
        self.polls: list[Poll] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="faults-status", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> list[Poll]:
        self._stop.set()
        self._thread.join(POLL_TIMEOUT_S + 5.0)
        return list(self.polls)

    def _run(self) -> None:
        with security.channel(self.address, RECONNECT_OPTIONS) as channel:
            stub = rpc.ClusterStub(channel)
            while not self._stop.is_set():
                started = time.perf_counter()
                try:
                    status = stub.GetClusterStatus(pb.ClusterStatusRequest(), timeout=POLL_TIMEOUT_S)
                    poll = Poll(
                        started - self.t0,
                        {b.name: state_name(b.state) for b in status.boards},
                        {b.name: b.served_total for b in status.boards},
                    )
                except grpc.RpcError as exc:
                    poll = Poll(started - self.t0, None, {}, exc.code().name)
                self.polls.append(poll)
                self._stop.wait(max(0.0, self.interval_s - (time.perf_counter() - started)))
