"""``npudure status``: what a scheduler (cluster) or an agent (node) reports, as a table or JSON."""

from __future__ import annotations

import argparse
import json
import sys

import grpc
from google.protobuf.json_format import MessageToDict

from npudure import extras
from npudure.argtypes import positive
from npudure.proto import contract
from npudure.proto import inference_pb2 as pb
from npudure.proto import inference_pb2_grpc as rpc
from npudure.security import access as security


def fetch_status(target: str, timeout_s: float = 5.0) -> pb.ClusterStatus | pb.NodeStatus:
    """ClusterStatus when ``target`` is a scheduler, NodeStatus when it is an agent."""
    with security.channel(target) as channel:
        try:
            cluster: pb.ClusterStatus = rpc.ClusterStub(channel).GetClusterStatus(
                pb.ClusterStatusRequest(), timeout=timeout_s
            )
            return cluster
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.UNIMPLEMENTED:
                raise
        node: pb.NodeStatus = rpc.NodeStub(channel).GetStatus(pb.NodeStatusRequest(), timeout=timeout_s)
        return node


def _reading(r: pb.Reading) -> str:
    return f"{r.name}={r.value:.1f}{r.unit}" if r.HasField("value") else f"{r.name}=absent"


def _contexts(status: pb.NodeStatus) -> str:
    """ "8 context(s) on 2 NPU core(s) (RK3576 default, measured)"; PROVISIONAL in capitals where the
    count is a guess. An older agent reports no contexts: its npu_cores was its context count."""
    if not status.contexts:
        return f"{status.npu_cores} context(s)"
    source = status.contexts_source.replace("provisional", "PROVISIONAL")
    return f"{status.contexts} context(s) on {status.npu_cores} NPU core(s) ({source or 'source unknown'})"


def models_placed(status: pb.NodeStatus) -> str:
    """A board's models with their load, the default marked: "general* 1/8, plates 0/2" (in flight /
    contexts); "-" from an agent that reports none."""
    return (
        ", ".join(f"{m.name}{'*' if m.default else ''} {m.in_flight}/{m.contexts}" for m in status.models)
        or "-"
    )


def _print_node(status: pb.NodeStatus) -> None:
    emulated = " (EMULATED NPU)" if status.emulated else ""
    print(f"node {status.node}: backend {status.backend}{emulated}, {_contexts(status)}")
    print(
        f"  agent {status.agent_version}  runtime {status.runtime_version}  "
        f"model sha256 {status.model_sha256 or '-'}"
    )
    print(
        f"  in flight {status.in_flight}  queued {status.queue_depth}  served {status.served_total}  "
        f"errors {status.errors_total}  hung workers {status.hung_workers}  "
        f"cpu cap {status.cpu_cap_mhz or 'none'}"
    )
    for m in status.models:
        print(
            f"  model {m.name}{' (default)' if m.default else ''}: {m.contexts} context(s) "
            f"({m.contexts_source or '-'}), in flight {m.in_flight}  queued {m.queue_depth}  "
            f"served {m.served_total}  input {m.input_size}  classes {m.classes}  "
            f"sha256 {m.model_sha256 or '-'}"
        )
    note = f" ({status.cpu_cap_note})" if status.cpu_cap_note else ""
    print(f"  soc {status.soc or '-'}  context recoveries {status.context_recoveries}{note}")
    reasons = ", ".join(status.not_serving_reasons)
    print(f"  proxyless clients: {'NOT serving (' + reasons + ')' if reasons else 'serving'}")
    if status.emulation_model_s_total > 0:
        lag = status.emulation_actual_s_total / status.emulation_model_s_total - 1
        print(
            f"  emulation: modelled {status.emulation_model_s_total:.1f} s, achieved "
            f"{status.emulation_actual_s_total:.1f} s of NPU service since start (lag {lag:+.1%})"
        )
    t = status.telemetry
    print(f"  thermal: {' '.join(map(_reading, t.thermal_c)) or 'no sensors'}")
    print(f"  cpu MHz: {' '.join(map(_reading, t.cpu_freq_mhz)) or 'no cpufreq'}")
    print(f"  npu: {' '.join(map(_reading, t.npu)) or 'not readable'}")


def _print_cluster(status: pb.ClusterStatus) -> None:
    Console = extras.require("rich.console", "the cluster table").Console
    Table = extras.require("rich.table", "the cluster table").Table
    table = Table(
        title=f"policy {status.policy} · queue {status.queue_depth}/{status.queue_limit} · "
        f"{status.connections_per_board} conn/board · lease {status.lease_holder or 'free'}"
    )
    columns = ("board", "address", "state", "in flight", "ewma ms", "served", "failures", "backend", "models")
    for col in columns:
        table.add_column(col)
    for b in status.boards:
        backend = (
            b.last_status.backend + (" (emulated)" if b.last_status.emulated else "")
            if b.HasField("last_status")
            else "?"
        )
        table.add_row(
            b.name,
            b.address,
            contract.board_state_label(b.state),
            f"{b.in_flight}/{b.max_in_flight}",
            f"{b.ewma_service_ms:.1f}",
            str(b.served_total),
            str(b.failures_total),
            backend,
            models_placed(b.last_status) if b.HasField("last_status") else "?",
        )
    Console(width=max(120, Console().width)).print(table)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", default="127.0.0.1:50050", help="scheduler or agent host:port")
    parser.add_argument("--json", action="store_true", help="print JSON (for scripts and Ansible)")
    parser.add_argument("--timeout", type=positive, default=5.0, help="deadline, s (default 5)")


def run(args: argparse.Namespace) -> int:
    try:
        status = fetch_status(args.target, args.timeout)
    except grpc.RpcError as exc:
        print(
            f"npudure status: {args.target}: {exc.code().name}: {exc.details()} "
            f"(is the agent/scheduler running and the address right?){security.tls_hint(exc)}",
            file=sys.stderr,
        )
        return 1
    if args.json:
        kind = "cluster" if isinstance(status, pb.ClusterStatus) else "node"
        body = MessageToDict(
            status, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
        )
        print(json.dumps({"kind": kind, **body}, indent=2))
    elif isinstance(status, pb.ClusterStatus):
        _print_cluster(status)
    else:
        _print_node(status)
    return 0
