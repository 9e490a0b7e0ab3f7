"""Under load: the reference's policy A/B and a board dying mid-load (real processes, loopback)."""

from __future__ import annotations

import pytest
from loadgen import run_closed_loop

from npudure import security
from npudure.local import LocalCluster
from npudure.proto import inference_pb2 as pb
from npudure.proto import inference_pb2_grpc as rpc

TIME_SCALE = 10.0  # 16 inf/s per emulated board: the test machine stays far from its own limits


def admin(address: str) -> rpc.ClusterStub:
    return rpc.ClusterStub(security.channel(address))


@pytest.mark.slow
def test_policy_ab_with_one_board_slowed() -> None:
    """board3 capped to 816 MHz (2.26x slower): load-aware policies beat round robin; the stale one herds."""
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
            print(
                f"{name:24s} {r.throughput:6.1f} req/s  p99 {r.p(99) * 1e3:7.1f} ms  errors {len(r.errors)}"
            )
            assert not r.errors, r.errors[:3]
    rr = results["round_robin"]
    for policy in ("least_inflight", "ect"):
        assert results[policy].throughput > 1.15 * rr.throughput, policy
        assert results[policy].p(99) < rr.p(99), policy
    # Round robin sends the slow board a third of the work whatever its speed.
    share = results["round_robin"].nodes.count("board3") / len(results["round_robin"].nodes)
    assert share == pytest.approx(1 / 3, abs=0.05)
    # Herding: scoring on 1 s-old state piles requests on whichever board looked idle at the last poll.
    assert results["heartbeat_least_queue"].throughput < 0.85 * results["least_inflight"].throughput


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
