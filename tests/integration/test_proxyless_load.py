"""Proxyless clients under load, over a real scheduler and 3 sim agents on loopback (board3 slowed
2.26×, as the heterogeneity dial at 816 MHz does): the spread follows capacity, nothing is lost when
an agent dies or the scheduler restarts, and a drained board gets no more requests.

Shapes only (who gets more, how many failed), never throughput thresholds.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import grpc
import numpy as np
import pytest

from npudure.client.proxyless import ProxylessTarget
from npudure.proto import inference_pb2 as pb
from npudure.proto import inference_pb2_grpc as rpc
from npudure.security import access as security
from npudure_workshop.bench.load import closed_loop
from npudure_workshop.lab.local import LocalCluster

SLOWDOWN = 2.26
TIME_SCALE = 3.0  # ~37 ms per frame per slot: a few hundred frames per test on a small machine


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(
        boards=3,
        time_scale=TIME_SCALE,
        npu_cores=2,
        # As the fault suite deploys it: a hang is seen (health NOT_SERVING) before a stuck attempt's
        # per-attempt deadline (board_timeout_s, 2 s) runs out, so its retry goes to another board.
        agent_overrides={"hang_timeout_s": 1.0},
        per_board_overrides={"board3": {"sim": {"time_scale": TIME_SCALE * SLOWDOWN, "seed": 3}}},
        scheduler_overrides={"health_interval_s": 0.2, "status_interval_s": 0.5},
    ) as c:
        yield c


@dataclass
class Run:
    nodes: Counter[str] = field(default_factory=Counter)
    sent: list[tuple[float, str]] = field(default_factory=list)  # (seconds into the window, board)
    failures: Counter[str] = field(default_factory=Counter)
    route_changes: int = 0


async def run_load(
    cluster: LocalCluster,
    duration_s: float,
    concurrency: int = 10,
    actions: tuple[tuple[float, Callable[[], None]], ...] = (),
    warmup_s: float = 1.0,
) -> Run:
    """The harness's closed loop through a ProxylessTarget; ``actions`` run (on a thread) at their
    offsets into the measured window."""
    payload = pb.InferRequest(
        encoding=pb.ENCODING_RAW_RGB, frame=np.zeros((640, 640, 3), np.uint8).tobytes()
    ).SerializeToString()
    target = ProxylessTarget(cluster.address)
    await target.open()
    try:
        await asyncio.sleep(0)
        t0 = time.perf_counter()

        async def driver() -> None:
            for at, action in actions:
                await asyncio.sleep(max(0.0, t0 + warmup_s + at - time.perf_counter()))
                await asyncio.to_thread(action)

        load, _ = await asyncio.gather(
            closed_loop(
                target, [payload], concurrency, warmup_s, duration_s, min_samples=0, timeout_s=15.0, t0=t0
            ),
            driver(),
        )
        route_changes = target.route_changes
    finally:
        await target.close()
    s = load.samples
    measured = s.ok & (s.sent_s >= warmup_s)
    sent = [
        (float(t) - warmup_s, s.node_names[i])
        for t, i in zip(s.sent_s[measured], s.node_idx[measured], strict=True)
    ]
    return Run(Counter(node for _, node in sent), sent, Counter(load.error_messages), route_changes)


def cluster_stub(cluster: LocalCluster) -> tuple[grpc.Channel, rpc.ClusterStub]:
    channel = security.channel(cluster.address)
    return channel, rpc.ClusterStub(channel)


async def test_load_follows_capacity_with_one_slowed_board(cluster: LocalCluster) -> None:
    run = await run_load(cluster, duration_s=4.0)
    assert not run.failures
    slow = run.nodes["board3"]
    assert slow > 0, run.nodes  # the slow board still serves its share
    # Round robin would give every board the same count in a closed loop; by capacity, each fast
    # board serves about 2.26x the slow one's.
    for fast in ("board1", "board2"):
        assert run.nodes[fast] > 1.4 * slow, run.nodes


async def test_nothing_is_lost_when_an_agent_is_killed_mid_load(cluster: LocalCluster) -> None:
    try:
        run = await run_load(cluster, duration_s=4.0, actions=((1.0, lambda: cluster.kill_agent("board1")),))
    finally:
        cluster.restart_agent("board1")
    assert not run.failures, run.failures
    assert run.nodes["board2"] > 0 and run.nodes["board3"] > 0
    # Back in rotation after its restart (health checks reconnect; no route change needed).
    again = await run_load(cluster, duration_s=2.0, warmup_s=2.0)
    assert again.nodes["board1"] > 0 and not again.failures


async def test_a_drained_board_gets_no_more_requests(cluster: LocalCluster) -> None:
    channel, stub = cluster_stub(cluster)
    with channel:

        def drain(on: bool) -> Callable[[], None]:
            return lambda: stub.DrainNode(pb.DrainNodeRequest(node="board2", drain=on), timeout=5)

        try:
            run = await run_load(cluster, duration_s=4.0, actions=((1.0, drain(True)),))
        finally:
            drain(False)()
    assert not run.failures
    before = Counter(node for t, node in run.sent if t < 1.0)
    # The budget: out of rotation within 2 s (health push + route refresh).
    after = Counter(node for t, node in run.sent if t >= 3.0)
    assert before["board2"] > 0, before
    assert after["board2"] == 0, after
    assert after["board1"] > 0 and after["board3"] > 0


async def test_a_scheduler_restart_costs_proxyless_clients_nothing(cluster: LocalCluster) -> None:
    run = await run_load(cluster, duration_s=4.0, actions=((1.0, cluster.restart_scheduler),))
    assert not run.failures, run.failures
    assert sum(run.nodes.values()) > 0
    assert run.route_changes == 0  # the same boards before and after: nothing to rebuild


async def test_a_hung_npu_costs_nothing(cluster: LocalCluster) -> None:
    """Calls stuck on the hung board are abandoned after the per-attempt deadline and retried elsewhere;
    its health then keeps new calls away until the hang clears."""
    address = cluster.agents["board2"].address

    def inject(fault: int) -> Callable[[], None]:
        def act() -> None:
            with security.channel(address) as channel:
                rpc.NodeStub(channel).InjectFault(pb.InjectFaultRequest(fault=fault), timeout=5)

        return act

    try:
        run = await run_load(cluster, duration_s=6.0, actions=((1.0, inject(pb.FAULT_HANG)),))
    finally:
        inject(pb.FAULT_NONE)()
    assert not run.failures, run.failures
    late = Counter(node for t, node in run.sent if t >= 4.0)
    assert late["board2"] == 0 and late["board1"] > 0, late


async def test_a_frozen_board_leaves_the_rotation_and_costs_nothing(cluster: LocalCluster) -> None:
    """SIGSTOP: the board's TCP connections stay open but nothing answers, as with a cut link. The
    client's keepalive pings find out, its calls fail over, and no new call goes to it."""
    pid = cluster.agents["board2"].pid
    assert pid is not None

    def signal_board(sig: int) -> Callable[[], None]:
        return lambda: os.kill(pid, sig)

    try:
        run = await run_load(
            cluster,
            duration_s=10.0,
            actions=((1.0, signal_board(signal.SIGSTOP)), (6.0, signal_board(signal.SIGCONT))),
        )
    finally:
        os.kill(pid, signal.SIGCONT)
    assert not run.failures, run.failures
    frozen = Counter(node for t, node in run.sent if 4.0 <= t < 6.0)
    assert frozen["board2"] == 0 and frozen["board1"] > 0 and frozen["board3"] > 0, frozen
    after = Counter(node for t, node in run.sent if t >= 8.0)
    assert after["board2"] > 0, after  # back once it answers again
