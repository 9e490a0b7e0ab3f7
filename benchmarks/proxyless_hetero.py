#!/usr/bin/env python3
"""Proxyless vs central with one slowed board: what share of the boards' summed capacity each delivers.

Prints figures with their conditions; asserts nothing.

One board's CPU clock is capped at 816 MHz through the scheduler (``SetNodeCpuCap``, the heterogeneity
dial: 2.26× slower on the sim model). Each board's capacity is first measured alone (closed loop
straight to it, 2 requests per NPU context); then, over all boards, closed loops of the same depth:

* central: the scheduler forwarding with round_robin, least_inflight and ect;
* proxyless: the client channel from ``GetRoute`` (weighted_round_robin fed by ORCA trailers), and the
  same channel with plain round_robin (the floor every gRPC implementation has).

Sim agents (EMULATED NPU), real gRPC over loopback.

    .venv/bin/python benchmarks/proxyless_hetero.py --duration 6 --repetitions 2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
import numpy as np

from npudure.client.proxyless import ProxylessTarget
from npudure.client.routes import fetch_route_on
from npudure.proto import contract
from npudure.proto import inference_pb2 as pb
from npudure.proto import inference_pb2_grpc as rpc
from npudure.security import access as security
from npudure_workshop.bench.fmt import text_table
from npudure_workshop.bench.load import LoadTarget, Target, closed_loop
from npudure_workshop.bench.results import write_json
from npudure_workshop.faults.analysis import error_codes
from npudure_workshop.lab.local import LocalCluster

CAP_MHZ = 816
OPTIONS = contract.message_size_options(16 << 20)


def one_channel(address: str) -> Target:
    """One bare channel to a scheduler or an agent: no token interceptor (frames need none)."""
    return Target(address, 1, options=OPTIONS, from_env=False)


async def measure(target: LoadTarget, payload: bytes, concurrency: int, args) -> dict[str, Any]:
    """One closed loop (the harness's) over ``target``: one channel to an address, or one over a
    proxyless route. Counts the replies sent and answered within the measured window."""
    await target.open(15)
    try:
        load = await closed_loop(target, [payload], concurrency, args.warmup, args.duration, min_samples=0)
    finally:
        await target.close()
    s = load.samples
    served = s.ok & (s.sent_s >= load.window_start_s) & (s.done_s <= load.window_end_s)
    nodes = Counter(s.node_names[i] for i in s.node_idx[served])
    window_s = load.window_end_s - load.window_start_s
    return {"req_per_s": sum(nodes.values()) / window_s, "nodes": dict(nodes), "errors": error_codes(s)}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--boards", type=int, default=3, help="sim agents (default 3)")
    p.add_argument("--slots", type=int, default=2, help="NPU contexts per agent (default 2, as RK3576)")
    p.add_argument(
        "--time-scale", type=float, default=4.0, help="sim time_scale (default 4: ~40 inf/s a board)"
    )
    p.add_argument("--per-slot", type=int, default=2, help="requests outstanding per NPU context (default 2)")
    p.add_argument("--duration", type=float, default=6.0, help="measured seconds per run (default 6)")
    p.add_argument("--warmup", type=float, default=2.0, help="unmeasured seconds first (default 2)")
    p.add_argument("--repetitions", type=int, default=2, help="repetitions of each mode (default 2)")
    p.add_argument("--out", type=Path, help="also write the results as JSON here")
    args = p.parse_args(argv)
    for name in ("boards", "slots", "per_slot", "repetitions"):
        if getattr(args, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be positive")
    if args.boards < 2:
        p.error("--boards must be at least 2 (one slowed, one not)")
    if args.duration <= 0 or args.warmup < 0 or args.time_scale <= 0:
        p.error("--duration and --time-scale must be positive, --warmup not negative")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    payload = pb.InferRequest(
        encoding=pb.ENCODING_RAW_RGB, frame=np.zeros((640, 640, 3), np.uint8).tobytes()
    ).SerializeToString()
    depth = args.slots * args.per_slot
    results: dict[str, Any] = {"alone": {}, "runs": []}
    with LocalCluster(
        boards=args.boards,
        time_scale=args.time_scale,
        npu_cores=args.slots,
        board_max_inflight=depth,
        agent_overrides={"queue_limit": 1024},
    ) as cluster:
        slowed = "board1"
        # SetNodeCpuCap is an admin RPC: the channel carries the cluster's token (LocalCluster sets it).
        with security.channel(cluster.address) as control:
            cluster_stub = rpc.ClusterStub(control)
            cluster_stub.SetNodeCpuCap(pb.SetNodeCpuCapRequest(node=slowed, mhz=CAP_MHZ), timeout=10)
            # The run's routes are fixed: the scheduler's (weighted_round_robin) and the same with
            # plain round_robin.
            route = fetch_route_on(control, cluster.address)
            sc = json.loads(route.service_config_json)
            sc["loadBalancingConfig"] = [{"round_robin": {}}]
            routes = {
                "weighted_round_robin": route,
                "round_robin": replace(route, service_config_json=json.dumps(sc)),
            }
            for name, proc in cluster.agents.items():
                r = asyncio.run(measure(one_channel(proc.address), payload, depth, args))
                results["alone"][name] = r["req_per_s"]
                log(f"  {name} alone: {r['req_per_s']:.1f} req/s")
            summed = sum(results["alone"].values())
            modes = [
                ("central", "round_robin"),
                ("central", "least_inflight"),
                ("central", "ect"),
                ("proxyless", "weighted_round_robin"),
                ("proxyless", "round_robin"),
            ]
            for rep in range(args.repetitions):
                order = modes if rep % 2 == 0 else modes[::-1]
                for mode, policy in order:
                    if mode == "central":
                        cluster_stub.SetPolicy(pb.SetPolicyRequest(policy=policy), timeout=5)
                        target: LoadTarget = one_channel(cluster.address)
                    else:
                        target = ProxylessTarget(
                            cluster.address, 1, options=OPTIONS, fixed_route=routes[policy], from_env=False
                        )
                    r = asyncio.run(measure(target, payload, depth * args.boards, args))
                    r |= {
                        "mode": mode,
                        "policy": policy,
                        "repetition": rep + 1,
                        "share": r["req_per_s"] / summed,
                    }
                    results["runs"].append(r)
                    log(
                        f"  rep {rep + 1} {mode:9s} {policy:20s} {r['req_per_s']:6.1f} req/s "
                        f"{r['share']:.0%} {r['nodes']}"
                    )
            cluster_stub.SetNodeCpuCap(pb.SetNodeCpuCapRequest(node=slowed, mhz=0), timeout=10)

    conditions = {
        "machine": f"{os.cpu_count()} CPUs, {platform.system()} {platform.release()}, load average "
        + " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "grpcio": grpc.__version__,
        "boards": f"{args.boards} sim agents (EMULATED NPU) × {args.slots} contexts, "
        f"time_scale {args.time_scale}; {slowed} capped at {CAP_MHZ} MHz (2.26× slower on the sim model)",
        "load": f"closed loop, {args.per_slot} requests per context ({depth} per board, "
        f"{depth * args.boards} in all), 1.2 MB raw frames, warm-up {args.warmup} s, {args.duration} s "
        f"measured, {args.repetitions} repetition(s), order reversed every other repetition",
        "central": f"scheduler board_max_inflight {depth} (= the per-board depth), 2 connections per board",
        "proxyless": "one grpc.aio channel to the GetRoute target; WRR blackout 0.2 s, weight update 0.1 s, "
        "ORCA window 1 s",
    }
    results["conditions"] = conditions
    print("\nProxyless vs central, one board slowed 2.26× — backend sim (EMULATED NPU), loopback")
    for k, v in conditions.items():
        print(f"  {k:10s} {v}")
    print(
        "  capacities alone: "
        + ", ".join(f"{n} {v:.1f}" for n, v in results["alone"].items())
        + f" req/s; sum {summed:.1f}"
    )
    rows = []
    for mode, policy in modes:
        runs = [r for r in results["runs"] if r["mode"] == mode and r["policy"] == policy]
        rate = float(np.median([r["req_per_s"] for r in runs]))
        errors = sum(sum(r["errors"].values()) for r in runs)
        per_board = ", ".join(f"{n} {c}" for n, c in sorted(runs[-1]["nodes"].items()))
        rows.append(
            [
                mode,
                policy,
                f"{rate:.1f}",
                f"{rate / summed:.0%}",
                per_board + (f"  ERRORS {errors}" if errors else ""),
            ]
        )
    # Left-aligned names, right-aligned figures; the per-board counts (free text) last.
    table = text_table(
        ["mode", "policy", "req/s", "of sum", "per board (last rep)"], rows, align="llrrl", indent="  "
    )
    print("\n" + "\n".join(table))
    print("  req/s: median of repetitions; of sum: / the summed capacities measured alone.")
    if args.out:
        write_json(args.out, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
