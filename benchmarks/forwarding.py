#!/usr/bin/env python3
"""Forwarding cost of the NPUDure scheduler next to nginx ``grpc_pass`` and proxyless clients: prints
figures, asserts nothing.

Same run, same agents, same 1.2 MB raw frames, same load generator:

1. forwarding capacity (req/s, closed loop at saturation) and the proxy's CPU-ms per request,
   for the scheduler, for nginx (``least_conn``, one worker), proxyless (the generator's gRPC channel
   balances over the boards itself from the scheduler's ``GetRoute``: weighted_round_robin + ORCA,
   no proxy), and straight to the agents (round robin over the addresses by hand: the ceiling the
   generator and agents allow);
2. latency the proxy adds at concurrency 1 (p50/p99 via the proxy minus direct), targets interleaved;
3. routing decision time: each policy's choose() + in-flight bookkeeping on N boards, and the
   ``route_us`` / ``scheduler_queue_us`` the scheduler reports in its responses.

The agents run the ``sim`` backend (EMULATED NPU) with a tiny time_scale, so the NPU is never the
bottleneck; the network path (real gRPC over loopback sockets) is real. The load generator runs in its
own process. By default the proxy under test is pinned to CPU 0 and the generator and agents to the
others (``--pinning split``), so each proxy is measured on one core, as nginx runs one worker. Other
processes on the machine are not moved: the report shows how much CPU they took and how long the
proxy waited for its CPU.

    .venv/bin/python benchmarks/forwarding.py --duration 5 --repetitions 3 --out build/forwarding.json
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from npudure.service.runtime import MALLOC_TUNING
from npudure_workshop.bench.forwarding.generator import CLIENT_CONNECTIONS, FRAME_SHAPE, Generator
from npudure_workshop.bench.forwarding.meter import Plan, pin, plan_pinning
from npudure_workshop.bench.forwarding.nginx import Nginx, nginx_version
from npudure_workshop.bench.forwarding.phases import capacity_phase, latency_phase, summarize
from npudure_workshop.bench.forwarding.report import report
from npudure_workshop.bench.forwarding.routing import routing_microbench
from npudure_workshop.bench.results import write_json


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--duration", type=float, default=5.0, help="measured seconds per run (default 5)")
    p.add_argument(
        "--warmup", type=float, default=1.0, help="unmeasured seconds before each capacity run (default 1)"
    )
    p.add_argument("--repetitions", type=int, default=3, help="repetitions of every run (default 3)")
    p.add_argument(
        "--concurrency", type=int, default=32, help="requests outstanding in capacity runs (default 32)"
    )
    p.add_argument("--agents", type=int, default=4, help="sim agents (default 4)")
    p.add_argument("--slots", type=int, default=4, help="NPU slots per sim agent (npu_cores, default 4)")
    p.add_argument(
        "--time-scale", type=float, default=0.01, help="sim service-time scale (default 0.01: ~0.12 ms)"
    )
    p.add_argument("--policy", default="least_inflight", help="scheduler policy (default least_inflight)")
    p.add_argument(
        "--block", type=int, default=20, help="latency runs: requests per target per turn (default 20)"
    )
    p.add_argument(
        "--pinning",
        choices=("split", "none"),
        default="split",
        help="split: proxy on CPU 0, everything else on the other CPUs (default); none: no pinning",
    )
    p.add_argument("--nginx", default=shutil.which("nginx") or "/usr/sbin/nginx", help="nginx binary")
    p.add_argument("--micro-iterations", type=int, default=20000, help="routing microbenchmark iterations")
    p.add_argument("--out", type=Path, help="also write the results as JSON here")
    p.add_argument(
        "--quick",
        action="store_true",
        help="smoke run, a few seconds in total; sets duration, warm-up, repetitions, concurrency, agents, "
        "slots, block and micro-iterations to tiny values (the figures are noise)",
    )
    args = p.parse_args(argv)
    if args.quick:
        args.duration, args.warmup, args.repetitions = 0.4, 0.2, 1
        args.concurrency, args.agents, args.slots, args.block = 4, 2, 2, 5
        args.micro_iterations = 300
    for name in ("duration", "repetitions", "concurrency", "agents", "slots", "block", "micro_iterations"):
        if getattr(args, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be positive")
    return args


def conditions_for(args, plan: Plan, nginx_version_text: str, payload_bytes: int | None) -> dict[str, Any]:
    import grpc

    return {
        "machine": f"{os.cpu_count()} CPUs ({platform.processor() or platform.machine()}), "
        f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "grpcio": grpc.__version__,
        "nginx": nginx_version_text,
        "frame": f"640x640x3 raw RGB = {np.prod(FRAME_SHAPE):,} B; request message {payload_bytes or 0:,} B",
        "backend": f"sim (EMULATED NPU), time_scale {args.time_scale} "
        f"(~{12.38 * args.time_scale:.2f} ms per frame per slot)",
        "agents": f"{args.agents} agents × {args.slots} slots (queue_limit 1024); scheduler policy "
        f"{args.policy}, board_max_inflight {4 * args.slots}, 2 connections per board",
        "nginx setup": "worker_processes 1 (one process, like the scheduler), upstream least_conn over the "
        f"same agents, keepalive {2 * args.concurrency}, grpc_pass grpc://, h2c listener, "
        "client_max_body_size 8m, client_body_buffer_size 2m, access_log off",
        "generator": f"separate process, grpc.aio raw bytes, {CLIENT_CONNECTIONS} connections per address; "
        f"proxyless: {CLIENT_CONNECTIONS} channels to the GetRoute target (weighted_round_robin + ORCA, "
        "health checking, retries), each with one connection per agent",
        "pinning": plan.description,
        "capacity runs": f"closed loop, concurrency {args.concurrency}, warm-up {args.warmup} s, "
        f"{args.duration} s measured, {args.repetitions} repetition(s), targets rotated",
        "latency runs": f"concurrency 1, {args.duration} s per repetition, targets interleaved "
        f"in blocks of {args.block}",
        "malloc": " ".join(f"{k}={v}" for k, v in MALLOC_TUNING.items()) + " (scheduler, agents, generator)",
        "load average": " ".join(f"{x:.2f}" for x in os.getloadavg()) + " (at the end)",
        **({"mode": "QUICK smoke run: the figures are noise"} if args.quick else {}),
    }


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)  # SIGTERM cleans up like Ctrl-C: finally blocks run
    from npudure.client.routes import RouteError, fetch_route
    from npudure_workshop.lab.local import LocalCluster, free_port

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    os.environ.update(MALLOC_TUNING)  # the generator child inherits it (glibc reads it at start)
    plan = plan_pinning(args.pinning)
    version = nginx_version(args.nginx) if args.nginx and Path(args.nginx).exists() else None
    nginx_note = ""
    if version is None:
        nginx_note = (
            f"not found at {args.nginx!r}: peer SKIPPED. Install it with `apt-get install nginx-light` "
            "(or pass --nginx /path/to/nginx)"
        )
        log(f"nginx {nginx_note}")
    version_text = ".".join(map(str, version)) if version else "absent"

    log(f"routing microbenchmark ({args.micro_iterations} iterations per cell)...")
    routing = routing_microbench((4, 16, 64), args.micro_iterations)

    cluster = LocalCluster(
        boards=args.agents,
        backend="sim",
        time_scale=args.time_scale,
        policy=args.policy,
        npu_cores=args.slots,
        board_max_inflight=4 * args.slots,
        connections_per_board=2,
        agent_overrides={"queue_limit": 1024},
    )
    nginx: Nginx | None = None
    gen: Generator | None = None
    try:
        log(f"starting {args.agents} sim agents and the scheduler...")
        cluster.start()
        agent_addresses = [p.address for p in cluster.agents.values()]
        targets = ["scheduler", "proxyless", "direct"]
        if version:
            nginx = Nginx(
                args.nginx, version, agent_addresses, keepalive=2 * args.concurrency, port=free_port()
            )
            nginx.start()
            targets = ["scheduler", "nginx", "proxyless", "direct"]
        assert cluster.scheduler is not None and cluster.scheduler.pid is not None
        agent_pids = [p.pid for p in cluster.agents.values() if p.pid]
        gen = Generator(plan.rest_cpus)
        if plan.proxy_cpus and plan.rest_cpus:
            pin([cluster.scheduler.pid, *(nginx.pids() if nginx else [])], plan.proxy_cpus)
            pin([*agent_pids, os.getpid()], plan.rest_cpus)
        addresses = {"scheduler": [cluster.address], "direct": agent_addresses}
        if nginx:
            addresses["nginx"] = [nginx.address]
        route = fetch_route(cluster.address)
        opened = gen.call("open", addresses, (cluster.address, route), timeout_s=60)
        groups = {"scheduler": [cluster.scheduler.pid], "agents": agent_pids, "generator": [gen.pid]}
        if nginx:
            groups["nginx"] = nginx.pids()
        log("capacity runs...")
        cap_runs = capacity_phase(gen, targets, groups, args, log)
        log("latency runs (concurrency 1)...")
        lat_reps = latency_phase(gen, targets, groups, args, log)
        if nginx and "buffered to a temporary file" in nginx.errors():
            nginx_note = "WARNING: nginx buffered request bodies to disk (see its error log)"
    except (RuntimeError, TimeoutError, ConnectionError, RouteError) as exc:
        log(f"forwarding benchmark: {exc}")
        return 1
    finally:
        if gen:
            gen.stop()
        if nginx:
            nginx.stop()
        cluster.stop()

    summary = summarize(cap_runs, lat_reps, targets)
    conditions = conditions_for(args, plan, version_text, opened["payload_bytes"])
    print(report(conditions, summary, routing, targets, nginx_note), flush=True)
    if args.out:
        payload = {
            "conditions": conditions,
            "summary": summary,
            "capacity_runs": cap_runs,
            "routing_microbench": routing,
            "nginx_note": nginx_note,
        }
        write_json(args.out, payload)
        log(f"results written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
