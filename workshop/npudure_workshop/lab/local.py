"""``npudure local``: a scheduler and N agents as processes on loopback — the no-root quick path.

Also the Python API the tests, benchmarks and the harness use (``LocalCluster``): real processes,
real gRPC over real sockets, so a killed agent is a killed process.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc

from npudure.argtypes import contexts, model_spec, whole
from npudure.config import BACKENDS
from npudure.scheduler.policies import POLICIES
from npudure.security import access as security
from npudure.service.runtime import MALLOC_TUNING, SCHEDULER_MALLOC_TUNING


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_serving(address: str, timeout_s: float, process: subprocess.Popen | None = None) -> None:
    """Wait until the gRPC health service at ``address`` says SERVING (bounded)."""
    deadline = time.monotonic() + timeout_s
    with security.channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            if process is not None and process.poll() is not None:
                raise RuntimeError(f"process for {address} exited with code {process.returncode}")
            with contextlib.suppress(grpc.RpcError):
                # The stubs omit the methods HealthStub sets in __init__.
                reply = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=1)  # type: ignore[attr-defined]
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            time.sleep(0.1)
    raise TimeoutError(f"{address} did not report SERVING within {timeout_s:.0f}s")


@dataclass
class Proc:
    name: str
    address: str
    config_path: Path
    log_path: Path
    process: subprocess.Popen | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None


@dataclass
class LocalCluster:
    boards: int = 3
    backend: str = "sim"
    time_scale: float = 1.0
    policy: str = "least_inflight"
    connections_per_board: int = 2
    board_max_inflight: int = 8
    npu_cores: int | None = 2  # None: left to the agent (its SoC's count), as on a real board
    # Each agent's inference contexts (AgentConfig.contexts): 1..64 or auto.
    contexts: int | str = "auto"
    model: str | None = None
    # Several models on every board, name -> file (the sim ignores the file: None), the first the
    # default; replaces ``model``.
    models: dict[str, str | None] | None = None
    agent_overrides: dict[str, Any] = field(default_factory=dict)
    scheduler_overrides: dict[str, Any] = field(default_factory=dict)
    per_board_overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    workdir: Path | None = None
    start_timeout_s: float = 60.0
    log_level: str = "WARNING"
    # Serve the DeepStack-compatible HTTP API too (on a free port unless scheduler_overrides' http_api
    # names one): see ``http_url``.
    http_api: bool = False
    # Serve Frigate's zmq detector endpoint too (on a free port unless scheduler_overrides' zmq_api
    # names one): see ``zmq_endpoint``.
    zmq_api: bool = False
    # sim: SYNTHETIC detections per frame at most (npudure.backends.sim.synthetic_detections); 0 = none.
    synthetic_detections: int = 0
    # Admin token the servers require; None: a new one in the workdir. While the cluster runs, this
    # process's own clients use it (NPUDURE_ADMIN_TOKEN_FILE is set unless it already was).
    admin_token_file: Path | None = None
    agents: dict[str, Proc] = field(default_factory=dict, init=False)
    scheduler: Proc | None = field(default=None, init=False)
    _tmp: tempfile.TemporaryDirectory | None = field(default=None, init=False)
    _set_env: bool = field(default=False, init=False)
    _admin: dict[str, Any] = field(default_factory=dict, init=False)  # the credentials start() gave agents

    @property
    def address(self) -> str:
        assert self.scheduler is not None, "cluster not started"
        return self.scheduler.address

    @property
    def http_url(self) -> str:
        """The HTTP API's detection URL (``http_api=True``)."""
        assert self.scheduler is not None, "cluster not started"
        api = yaml.safe_load(self.scheduler.config_path.read_text()).get("http_api")
        assert api, "the cluster was started without http_api"
        scheme = "https" if self.scheduler_overrides.get("tls") else "http"
        return f"{scheme}://{api['listen']}/v1/vision/detection"

    @property
    def zmq_endpoint(self) -> str:
        """Frigate's ``endpoint:`` for this cluster (``zmq_api=True``): ``tcp://127.0.0.1:PORT``."""
        assert self.scheduler is not None, "cluster not started"
        api = yaml.safe_load(self.scheduler.config_path.read_text()).get("zmq_api")
        assert api, "the cluster was started without zmq_api"
        return f"tcp://{api['listen']}"

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> LocalCluster:
        if self.workdir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="npudure-local-")
            self.workdir = Path(self._tmp.name)
        self.workdir.mkdir(parents=True, exist_ok=True)
        admin: dict[str, Any] = {}
        overrides = {**self.agent_overrides, **self.scheduler_overrides}
        if not {"tls", "admin"} & overrides.keys():  # else the caller chose the credentials (e.g. mTLS)
            if self.admin_token_file is None:
                env = os.environ.get(security.ENV_TOKEN)
                self.admin_token_file = (
                    Path(env) if env else security.write_token(self.workdir / "admin-token")
                )
            if not os.environ.get(security.ENV_TOKEN):
                os.environ[security.ENV_TOKEN] = str(self.admin_token_file)
                self._set_env = True
            admin = {"admin": {"token_file": str(self.admin_token_file)}}
        self._admin = admin
        try:
            for i in range(1, self.boards + 1):
                name = f"board{i}"
                self.agents[name] = self._write(name, "agent", self._agent_config(name, i, admin))
            for proc in self.agents.values():
                self._spawn(proc, "agent")
            for proc in self.agents.values():
                self._wait(proc)
            sched = {
                "listen": f"127.0.0.1:{free_port()}",
                "metrics_port": 0,
                "policy": self.policy,
                "connections_per_board": self.connections_per_board,
                "board_max_inflight": self.board_max_inflight,
                "boards": [{"name": p.name, "address": p.address} for p in self.agents.values()],
                **admin,
                **self.scheduler_overrides,
            }
            if self.http_api:
                sched["http_api"] = {
                    "listen": f"127.0.0.1:{free_port()}",
                    **(self.scheduler_overrides.get("http_api") or {}),
                }
            if self.zmq_api:
                sched["zmq_api"] = {
                    "listen": f"127.0.0.1:{free_port()}",
                    **(self.scheduler_overrides.get("zmq_api") or {}),
                }
            self.scheduler = self._write("scheduler", "scheduler", sched)
            self._spawn(self.scheduler, "scheduler")
            self._wait(self.scheduler)
        except BaseException:
            self.stop()
            raise
        return self

    def _agent_config(self, name: str, seed: int, admin: dict[str, Any]) -> dict[str, Any]:
        return {
            "node_name": name,
            "listen": f"127.0.0.1:{free_port()}",
            "metrics_port": 0,
            "backend": self.backend,
            **({"npu_cores": self.npu_cores} if self.npu_cores else {}),
            "contexts": self.contexts,
            "sim": {
                "time_scale": self.time_scale,
                "seed": seed,
                **({"synthetic_detections": self.synthetic_detections} if self.synthetic_detections else {}),
            },
            **({"model": self.model} if self.model and not self.models else {}),
            **({"models": _model_entries(self.models)} if self.models else {}),
            **admin,
            **self.agent_overrides,
            **self.per_board_overrides.get(name, {}),
        }

    def add_agent(self, name: str, seed: int = 9) -> Proc:
        """One more agent beside the running cluster, serving but not yet in the scheduler's board set
        (write the set and reload it to add it); stopped with the cluster."""
        assert self.workdir is not None, "cluster not started"
        proc = self._write(name, "agent", self._agent_config(name, seed, self._admin))
        self.agents[name] = proc
        self._spawn(proc, "agent")
        self._wait(proc)
        return proc

    def _wait(self, proc: Proc) -> None:
        """Wait until ``proc`` serves; if it exited, say why in its own words (its last log line)."""
        try:
            wait_serving(proc.address, self.start_timeout_s, proc.process)
        except RuntimeError as exc:
            lines = self.logs(proc.name).strip().splitlines()
            reason = lines[-1] if lines else "no output"
            raise RuntimeError(f"{proc.name} did not start: {reason} ({exc})") from None

    def _write(self, name: str, kind: str, config: dict[str, Any]) -> Proc:
        assert self.workdir is not None
        path = self.workdir / f"{name}.yml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return Proc(name, config["listen"], path, self.workdir / f"{name}.log")

    def _spawn(self, proc: Proc, kind: str) -> None:
        env = {**os.environ, **(SCHEDULER_MALLOC_TUNING if kind == "scheduler" else MALLOC_TUNING)}
        with proc.log_path.open("ab") as log:
            proc.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "npudure",
                    kind,
                    "--config",
                    str(proc.config_path),
                    "--log-level",
                    self.log_level,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,  # Ctrl-C in a terminal reaches us, and we stop them in order
            )

    def stop(self) -> None:
        procs = [p.process for p in [self.scheduler, *self.agents.values()] if p and p.process]
        # SIGTERM to all first: each drains for shutdown.drain_s, in parallel rather than in turn.
        for process in procs:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in procs:
            _terminate(process, signalled=True)
        if self._set_env:
            os.environ.pop(security.ENV_TOKEN, None)
            self._set_env = False
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ fault injection
    def kill_agent(self, name: str) -> None:
        """SIGKILL: the board dies without a word."""
        proc = self.agents[name]
        if proc.process and proc.process.poll() is None:
            proc.process.kill()
            proc.process.wait(timeout=10)

    def restart_agent(self, name: str) -> None:
        """Start a stopped/killed agent again on the same address (a new emulated boot id)."""
        proc = self.agents[name]
        if proc.process and proc.process.poll() is None:
            _terminate(proc.process)
        self._spawn(proc, "agent")
        wait_serving(proc.address, self.start_timeout_s, proc.process)

    def restart_scheduler(self) -> None:
        """Start the scheduler again on the same address (after a crash or a kill)."""
        proc = self.scheduler
        assert proc is not None, "cluster not started"
        if proc.process and proc.process.poll() is None:
            _terminate(proc.process)
        self._spawn(proc, "scheduler")
        wait_serving(proc.address, self.start_timeout_s, proc.process)

    def logs(self, name: str) -> str:
        proc = self.scheduler if name == "scheduler" else self.agents[name]
        assert proc is not None
        return proc.log_path.read_text(errors="replace") if proc.log_path.exists() else ""


def _model_entries(models: dict[str, str | None]) -> list[dict[str, str]]:
    return [{"name": name, **({"model": path} if path else {})} for name, path in models.items()]


def _terminate(process: subprocess.Popen, timeout_s: float = 10.0, signalled: bool = False) -> None:
    if process.poll() is not None:
        return
    if not signalled:
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=timeout_s)


# ---------------------------------------------------------------------- CLI
def add_arguments(parser: argparse.ArgumentParser) -> None:
    cluster = parser.add_argument_group("the boards (agents)")
    scheduler = parser.add_argument_group("the scheduler")
    ports = parser.add_argument_group("ports on 127.0.0.1")
    files = parser.add_argument_group("files")
    cluster.add_argument("--boards", type=whole(1), default=3, help="number of agents (default 3)")
    cluster.add_argument(
        "--backend", choices=BACKENDS, default="sim", help="sim: emulated NPU; onnx: CPU (default sim)"
    )
    cluster.add_argument(
        "--model",
        type=model_spec,
        action="append",
        metavar="[NAME=]PATH",
        help="model file for the onnx/rknn backend (default: build/cached YOLOv8n); repeat as NAME=PATH "
        "to serve several models on every board, the first the default (sim: NAME= emulates one)",
    )
    cluster.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="sim: service-time multiplier, 10 = ten times slower boards (default 1)",
    )
    cluster.add_argument(
        "--contexts",
        type=contexts,
        default="auto",
        metavar="N",
        help="inference contexts per agent, 1 to 64 or auto (default auto: the sim takes the RK3576's "
        "measured 8, onnx one CPU session per NPU core)",
    )
    scheduler.add_argument(
        "--policy", default="least_inflight", choices=POLICIES, help="scheduler policy (default %(default)s)"
    )
    scheduler.add_argument(
        "--connections-per-board",
        type=whole(1),
        default=2,
        help="scheduler gRPC channels per board (default 2)",
    )
    ports.add_argument("--port", type=int, default=50050, help="scheduler port on 127.0.0.1 (0 = any free)")
    ports.add_argument(
        "--http-port",
        type=int,
        help="port of the DeepStack-compatible HTTP API on 127.0.0.1 (default 50080, any free one with "
        "--port 0; 0 = any free, -1 = off)",
    )
    ports.add_argument(
        "--zmq-port",
        type=int,
        help="port of Frigate's zmq detector endpoint on 127.0.0.1 (default 5555, any free one with "
        "--port 0; 0 = any free, -1 = off)",
    )
    cluster.add_argument(
        "--synthetic-detections",
        type=int,
        default=0,
        metavar="N",
        help="sim: up to N SYNTHETIC (made-up, frame-seeded) boxes per frame, to try box handling",
    )
    files.add_argument("--workdir", type=Path, help="keep configs and logs here (default: a temp dir)")


def run(args: argparse.Namespace) -> int:
    if args.workdir is not None:
        try:
            args.workdir.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=args.workdir):
                pass
        except OSError as exc:
            print(f"npudure local: cannot use --workdir {args.workdir}: {exc.strerror}", file=sys.stderr)
            return 1
    http_port = args.http_port if args.http_port is not None else (50080 if args.port else 0)
    zmq_port = args.zmq_port if args.zmq_port is not None else (5555 if args.port else 0)
    try:
        model, models = _models(args.model or [], args.backend)
    except ValueError as exc:
        print(f"npudure local: {exc}", file=sys.stderr)
        return 2
    cluster = LocalCluster(
        boards=args.boards,
        backend=args.backend,
        time_scale=args.time_scale,
        contexts=args.contexts,
        policy=args.policy,
        connections_per_board=args.connections_per_board,
        model=model,
        models=models,
        workdir=args.workdir,
        log_level="INFO",
        # Where `npudure status/bench` in another shell look by default.
        admin_token_file=Path(
            security.client_token_file() or security.ensure_token(security.default_token_file())
        ),
        scheduler_overrides={
            "listen": f"127.0.0.1:{args.port or free_port()}",
            **({"http_api": {"listen": f"127.0.0.1:{http_port or free_port()}"}} if http_port >= 0 else {}),
            **({"zmq_api": {"listen": f"127.0.0.1:{zmq_port or free_port()}"}} if zmq_port >= 0 else {}),
        },
        http_api=http_port >= 0,
        zmq_api=zmq_port >= 0,
        synthetic_detections=args.synthetic_detections,
    )
    stop = False

    def _stop(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        cluster.start()
    except (RuntimeError, TimeoutError) as exc:
        print(f"npudure local: could not start the cluster: {exc}", file=sys.stderr)
        return 1
    emulated = " (EMULATED NPU: sim backend)" if args.backend == "sim" else ""
    served = f"  models {', '.join(models)} (default {next(iter(models))})" if models else ""
    print(
        f"scheduler {cluster.address}  boards {args.boards}  backend {args.backend}{emulated}  "
        f"contexts {args.contexts}  policy {args.policy}{served}"
    )
    if cluster.http_api:
        print(f"HTTP API (DeepStack / CodeProject.AI) {cluster.http_url}")
    if cluster.zmq_api:
        print(f"Frigate zmq detector (type: zmq, endpoint) {cluster.zmq_endpoint}")
    for proc in cluster.agents.values():
        print(f"  {proc.name} {proc.address} pid {proc.pid}")
    print(f"admin token {cluster.admin_token_file} (npudure status/bench find it there)")
    print(f"logs and configs in {cluster.workdir}; Ctrl-C stops everything", flush=True)
    try:
        while not stop:
            time.sleep(0.2)
            dead = [
                p.name
                for p in [cluster.scheduler, *cluster.agents.values()]
                if p and p.process and p.process.poll() is not None
            ]
            if dead:
                print(f"npudure local: {', '.join(dead)} exited; stopping", file=sys.stderr)
                return 1
    finally:
        cluster.stop()
        print("stopped")
    return 0


def _models(
    specs: list[tuple[str | None, str]], backend: str
) -> tuple[str | None, dict[str, str | None] | None]:
    """``--model`` values as (the single model's file, or the named models); ValueError in one line."""
    if len(specs) <= 1 and all(name is None for name, _ in specs):
        model = specs[0][1] if specs else None
        if backend == "onnx" and not model:
            from npudure_workshop.model import ensure_model  # built once, then cached

            model = str(ensure_model().path)
        return model, None
    if any(name is None for name, _ in specs):
        raise ValueError("with several --model, name each one: --model NAME=PATH (the first is the default)")
    models: dict[str, str | None] = {}
    for name, path in specs:
        assert name is not None
        if name in models:
            raise ValueError(f"--model {name}= given twice: each model needs its own name")
        if backend != "sim" and path and not Path(path).is_file():
            raise ValueError(f"--model {name}={path}: no such file")
        if backend == "onnx" and not path:
            from npudure_workshop.model import ensure_model

            path = str(ensure_model().path)
        if backend == "rknn" and not path:
            raise ValueError(f"--model {name}= needs a .rknn file with the rknn backend")
        models[name] = path if backend != "sim" else None
    return None, models
