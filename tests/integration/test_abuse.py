"""Abuse THROUGH gRPC and HTTP: a real scheduler and real `sim` agents on loopback, hostile clients.

Each attack asserts the status it documents (docs/security.md, "What the data path bounds"), that a
legitimate client is served during it, and that every board is UP and SERVING afterwards with the
servers' RSS and fds back within a bound. Bounded: each attack runs a few seconds.
"""

from __future__ import annotations

import time

import grpc
import pytest
from abuse_clients import (
    LegitProbe,
    PeakSampler,
    board_states,
    storm,
    usage,
)
from grpc_health.v1 import health_pb2, health_pb2_grpc

from npudure.lab.local import LocalCluster

# Limits lowered so the suite reaches them quickly (the defaults are in npudure/config.py: ServerLimits).
LIMITS = {"max_connections": 64, "max_connection_idle_s": 3.0}


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(
        boards=3,
        time_scale=2.0,
        agent_overrides={"limits": LIMITS},
        scheduler_overrides={"limits": LIMITS},
    ) as c:
        yield c


def pids(cluster: LocalCluster) -> dict[str, int]:
    return {name: p.pid for name, p in [("scheduler", cluster.scheduler), *cluster.agents.items()]}


def assert_healthy(cluster: LocalCluster) -> None:
    """Every board UP in the scheduler and SERVING on its own health service."""
    deadline = time.monotonic() + 10
    while True:
        states = board_states(cluster.address)
        if set(states.values()) == {"UP"} or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert set(states.values()) == {"UP"}, states
    for proc in cluster.agents.values():
        with grpc.insecure_channel(proc.address) as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING, proc.name


def attack(cluster: LocalCluster, run, *, rss_growth_mib: float = 150, fd_growth: int = 40):
    """Run ``run()`` with a legitimate client beside it; check health and resources after."""
    before = {name: usage(pid) for name, pid in pids(cluster).items()}
    with PeakSampler(pids(cluster)) as peaks, LegitProbe(cluster.address) as legit:
        result = run()
    assert legit.failures == [], legit.failures[:5]
    assert legit.served > 0 and legit.worst_s < 10, (legit.served, legit.worst_s)
    assert_healthy(cluster)
    settle = time.monotonic() + 10
    while True:
        after = {name: usage(pid) for name, pid in pids(cluster).items()}
        over = {
            n: (before[n], after[n])
            for n in after
            if after[n].rss_mib > before[n].rss_mib + rss_growth_mib
            or after[n].fds > before[n].fds + fd_growth
        }
        if not over or time.monotonic() > settle:
            break
        time.sleep(0.5)
    assert not over, over
    return result, legit, peaks.peak


# ---------------------------------------------------------------------- deadlines and cancellations
def test_short_deadline_storm_leaves_every_board_up(cluster: LocalCluster) -> None:
    codes, _, _ = attack(cluster, lambda: storm(cluster.address, 12, 4.0, deadline_s=0.025))
    assert codes.get("DEADLINE_EXCEEDED", 0) > 50, codes  # the storm did miss its deadlines


def test_cancel_storm_leaves_every_board_up(cluster: LocalCluster) -> None:
    codes, _, _ = attack(cluster, lambda: storm(cluster.address, 12, 4.0, deadline_s=5.0, cancel_s=0.01))
    assert codes.get("CANCELLED", 0) > 50, codes
