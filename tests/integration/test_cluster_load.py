"""Under load: the reference's policy A/B and a board dying mid-load (real processes, loopback)."""

from __future__ import annotations

import pytest
from helpers.loadgen import run_closed_loop

from npudure.proto import inference_pb2 as pb
from npudure.proto import inference_pb2_grpc as rpc
from npudure.security import access as security
from npudure_workshop.lab.local import LocalCluster

TIME_SCALE = 10.0  # 16 inf/s per emulated board: the test machine stays far from its own limits


def admin(address: str) -> rpc.ClusterStub:
    return rpc.ClusterStub(security.channel(address))


@pytest.mark.slow
def test_policy_ab_with_one_board_slowed() -> None:
    """board3 capped to 816 MHz (2.26x slower): every policy serves; load-aware ones give it less work.

    Behaviour only: the policies' throughput and p99 figures belong in the benchmark's hetero
    experiment (`npudure bench run`), not in a unit of 5 s runs on a shared machine."""
    with LocalCluster(
        boards=3,
        time_scale=TIME_SCALE,
        per_board_overrides={"board3": {"sim": {"time_scale": TIME_SCALE, "seed": 3, "cpu_cap_mhz": 816}}},
    ) as cluster:
        stub = admin(cluster.address)
        results = {}
        for policy in ("round_robin", "least_inflight", "ect", "heartbeat_least_queue"):
            stub.SetPolicy(pb.SetPolicyRequest(policy=policy), timeout=5)
            run_closed_loop(cluster.address, concurrency=9, duration_s=1.0)  # warm-up, discarded
            results[policy] = run_closed_loop(cluster.address, concurrency=9, duration_s=5.0)
    for name, r in results.items():
        assert not r.errors, (name, r.errors[:3])
        assert {"board1", "board2", "board3"} <= set(r.nodes), name
    # Round robin sends the slow board a third of the work whatever its speed.
    rr = results["round_robin"].nodes
    assert rr.count("board3") / len(rr) == pytest.approx(1 / 3, abs=0.05)
    # Load-aware policies see board3's longer service (in-flight count, expected completion time) and
    # send it less than each fast board gets.
    for policy in ("least_inflight", "ect"):
        nodes = results[policy].nodes
        assert nodes.count("board3") < min(nodes.count("board1"), nodes.count("board2")), policy


@pytest.mark.slow
def test_killing_a_board_mid_load_loses_no_request() -> None:
    with LocalCluster(boards=3, time_scale=TIME_SCALE, policy="least_inflight") as cluster:
        killed = {}

        def tick(elapsed: float) -> None:
            if elapsed > 1.5 and not killed:
                killed["at"] = elapsed
                cluster.kill_agent("board2")

        result = run_closed_loop(cluster.address, concurrency=8, duration_s=5.0, on_tick=tick)
        status = admin(cluster.address).GetClusterStatus(pb.ClusterStatusRequest(), timeout=5)
        states = {b.name: b.state for b in status.boards}
        assert killed, "the board was never killed"
        assert result.errors == [], result.errors[:5]
        assert len(result.latencies_s) > 100
        assert states["board2"] == pb.BOARD_STATE_DOWN
        assert {"board1", "board3"} <= set(result.nodes)
        # Back in rotation once it answers health checks again.
        cluster.restart_agent("board2")
        after = run_closed_loop(cluster.address, concurrency=6, duration_s=4.0)
        assert after.errors == []
        assert "board2" in after.nodes
