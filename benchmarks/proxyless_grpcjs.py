#!/usr/bin/env python3
"""What grpc-js honours of the proxyless route: prints figures with conditions, asserts nothing.

Three sim agents (board3 2.26× slower), the scheduler's GetRoute target and service config, and a
Node.js closed loop (benchmarks/grpcjs/load.js, @grpc/grpc-js) with round_robin and with the route's
weighted_round_robin; then board2 is drained at the scheduler (its health turns NOT_SERVING) and both
run again: a client that honours healthCheckConfig sends board2 nothing.

    (cd benchmarks/grpcjs && npm install) && .venv/bin/python benchmarks/proxyless_grpcjs.py
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import grpc

from npudure.client.routes import fetch_route
from npudure.proto import inference_pb2 as pb
from npudure.proto import inference_pb2_grpc as rpc
from npudure_workshop.lab.local import LocalCluster

HERE = Path(__file__).resolve().parent / "grpcjs"
PROTO = Path(__file__).resolve().parents[1] / "npudure" / "proto" / "inference.proto"


def node_run(target: str, service_config: str, seconds: float, concurrency: int) -> dict:
    out = subprocess.run(
        ["node", str(HERE / "load.js"), target, service_config, str(seconds), str(concurrency), str(PROTO)],
        capture_output=True,
        text=True,
        timeout=seconds + 60,
        cwd=HERE,
    )
    try:
        return json.loads(out.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return {"error": (out.stderr or out.stdout)[-400:]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=6.0)
    p.add_argument("--concurrency", type=int, default=12)
    args = p.parse_args()
    if not shutil.which("node") or not (HERE / "node_modules" / "@grpc" / "grpc-js").is_dir():
        print(f"needs node and `npm install` in {HERE}", file=sys.stderr)
        return 2
    version = json.loads((HERE / "node_modules/@grpc/grpc-js/package.json").read_text())["version"]
    rows = []
    with LocalCluster(
        boards=3,
        time_scale=4.0,
        npu_cores=2,
        per_board_overrides={"board3": {"sim": {"time_scale": 4.0 * 2.26, "seed": 3}}},
    ) as cluster:
        route = fetch_route(cluster.address)
        rr = json.loads(route.service_config_json)
        rr["loadBalancingConfig"] = [{"round_robin": {}}]
        configs = {"round_robin": json.dumps(rr), "weighted_round_robin": route.service_config_json}
        for name, sc in configs.items():
            rows.append(("all in rotation", name, node_run(route.target, sc, args.seconds, args.concurrency)))
        with grpc.insecure_channel(cluster.address) as channel:
            rpc.ClusterStub(channel).DrainNode(pb.DrainNodeRequest(node="board2", drain=True), timeout=5)
            time.sleep(1.5)
            for name, sc in configs.items():
                rows.append(
                    ("board2 drained", name, node_run(route.target, sc, args.seconds, args.concurrency))
                )
    node_version = subprocess.run(["node", "-v"], capture_output=True, text=True).stdout.strip()
    print(f"\ngrpc-js {version}, node {node_version}")
    print(
        f"  3 sim agents (EMULATED NPU) × 2 contexts, time_scale 4 (~37 req/s each), board3 2.26× slower "
        f"(~16 req/s); closed loop, concurrency {args.concurrency}, {args.seconds:g} s, 1.2 MB raw frames; "
        "the same target and service config as `npudure infer --proxyless` (retry buffer 8 MiB)"
    )
    for state, policy, r in rows:
        errors = r.get("errors") or r.get("error")
        rate = r.get("rps", 0)
        print(f"  {state:16s} {policy:21s} {rate:6.1f} req/s  per board {r.get('nodes')}  errors {errors}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
