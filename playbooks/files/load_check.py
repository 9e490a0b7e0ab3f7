"""A short load check through the scheduler: N frames, C at a time, and which board served each.

Stands in for ``npudure bench`` in playbooks/benchmark.yml. Runs on the scheduler host with the
npudure virtualenv's Python. Writes ``requests.csv`` and ``summary.json`` into a new folder (a results
folder is never written into twice) and prints the summary as JSON.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import numpy as np

from npudure.proto import inference_pb2 as pb
from npudure.proto import inference_pb2_grpc as rpc

FRAME_BYTES = 640 * 640 * 3


def served_by_board(channel: grpc.Channel) -> dict[str, int]:
    status = rpc.ClusterStub(channel).GetClusterStatus(pb.ClusterStatusRequest(), timeout=5)
    return {board.name: board.served_total for board in status.boards}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="127.0.0.1:50050")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)

    if args.out.exists() and any(args.out.iterdir()):
        print(f"{args.out} already holds results; result folders are never written twice", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    frame = np.random.default_rng(0).integers(0, 256, FRAME_BYTES, dtype=np.uint8).tobytes()
    options = [("grpc.max_send_message_length", 16 << 20), ("grpc.max_receive_message_length", 16 << 20)]
    with grpc.insecure_channel(args.target, options=options) as channel:
        before = served_by_board(channel)
        stub = rpc.InferenceStub(channel)

        emulated: set[bool] = set()

        def one(n: int) -> tuple[int, str, float, str]:
            start = time.perf_counter()
            try:
                reply = stub.Infer(
                    pb.InferRequest(request_id=f"loadcheck-{n}", encoding=pb.ENCODING_RAW_RGB, frame=frame),
                    timeout=args.timeout,
                )
            except grpc.RpcError as exc:
                return n, "", time.perf_counter() - start, exc.code().name
            emulated.add(reply.emulated)
            return n, reply.node, time.perf_counter() - start, ""

        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=args.concurrency) as pool:
            results = sorted(pool.map(one, range(args.requests)))
        elapsed = time.perf_counter() - started
        after = served_by_board(channel)

    with open(args.out / "requests.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["request", "node", "latency_ms", "error"])
        writer.writerows((n, node, f"{latency * 1000:.3f}", error) for n, node, latency, error in results)
    latencies = sorted(latency * 1000 for _, node, latency, error in results if not error)
    summary = {
        "target": args.target,
        "requests": args.requests,
        "concurrency": args.concurrency,
        "ok": len(latencies),
        # True when any board ran the sim backend: its throughput and latency are emulated, not measured.
        "emulated": any(emulated),
        "errors": dict(Counter(error for *_, error in results if error)),
        "elapsed_s": round(elapsed, 3),
        "throughput_per_s": round(len(latencies) / elapsed, 2) if elapsed > 0 else 0.0,
        "latency_ms": {
            f"p{q}": round(float(np.percentile(latencies, q)), 3) if latencies else None for q in (50, 95, 99)
        },
        "responses_by_node": dict(Counter(node for _, node, _, error in results if not error)),
        "served_total_delta": {name: after.get(name, 0) - before.get(name, 0) for name in after},
    }
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
