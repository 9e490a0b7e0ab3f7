"""Operator scenarios on loopback, with real processes: a scheduler restart under central load, a
scheduler handover (``npudure scheduler --handover``: what the role now runs for a new package,
certificate or setting), and a board added by ``ReloadBoards`` (``systemctl reload npudure-scheduler``).

Prints, with the conditions:
- scheduler-restart: failed requests and the longest stretch without a successful reply (the issue's
  figure: 0 failed, no stretch of 0.5 s or more), and where the time went — SIGTERM, the old process's
  exit, the new one SERVING, the first successful reply after the restart, from the scheduler's log;
- handover: the same figures for a handover (the successor binds the same port, serves, then the old
  process closes its listener, sends GOAWAY and finishes its requests), with its timeline;
- add-board: seconds from the ``ReloadBoards`` call to the first request the new board receives (the
  issue's figure: within 5 s of its play), polled on the board's own ``served_total``;
- upgrade: a new npudure version (a copy of the sources with a bumped ``__version__``) rolled the way
  the roles do it, in both modes: each agent in turn drained, idle, SIGTERM'd, started on the new
  version, UP again; then the scheduler handed over to a process of the new version. The processes
  import npudure from one folder that is switched to the new copy, as a venv is reinstalled on a board.

The load is ``npudure_workshop.faults.operations.run_operation`` (the fault suite's generator and analysis);
the cluster is ``npudure_workshop.lab.local.LocalCluster`` (sim agents: an EMULATED NPU).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/operations.py            # ~40 s
    PYTHONPATH=$PWD .venv/bin/python benchmarks/operations.py --restarts 3
    PYTHONPATH=$PWD .venv/bin/python benchmarks/operations.py --only handover
    PYTHONPATH=$PWD .venv/bin/python benchmarks/operations.py --only upgrade
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import numpy as np
import yaml

from npudure import __version__
from npudure.client.admin import board_state, set_drain
from npudure.proto import inference_pb2 as pb
from npudure.proto import inference_pb2_grpc as rpc
from npudure.security import access as security
from npudure.service import handover
from npudure_workshop.bench.payloads import FrameSet
from npudure_workshop.faults.fleet import frozen_source
from npudure_workshop.faults.operations import OperationResult, run_operation, table
from npudure_workshop.lab.local import LocalCluster, wait_serving

FRAME = pb.InferRequest(
    encoding=pb.ENCODING_RAW_RGB, frame=np.zeros((640, 640, 3), np.uint8).tobytes()
).SerializeToString()
LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \w+ [\w.]+: (.*)$")
MARKS = ("NOT_SERVING", "stopped", "starting on", "restored from", "scheduler serving on", "handover")


def log_marks(text: str) -> list[tuple[float, str]]:
    """(unix time, line) of the scheduler's log lines that mark a step of a restart."""
    marks = []
    for line in text.splitlines():
        m = LOG_TIME.match(line)
        if m and any(k in m.group(2) for k in MARKS):
            when = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            marks.append((when, m.group(2)[:70]))
    return marks


def print_timeline(
    title: str,
    origin: str,
    result: OperationResult,
    steps: list[tuple[float, str]],
    cluster: LocalCluster,
    log_start: int,
    wall0: float,
) -> None:
    """The action's steps, the scheduler's log lines and the longest gap, in seconds from the first step."""
    marks = steps + log_marks(cluster.logs("scheduler")[log_start:])
    if result.gap_at_s is not None and result.longest_gap_s is not None:
        gap_start = wall0 + result.gap_at_s  # the run's t0 is taken at the call, beside wall0
        marks.append((gap_start, "longest gap starts (last reply before it)"))
        marks.append((gap_start + result.longest_gap_s, "longest gap ends (first reply after it)"))
    t0 = steps[0][0]
    print(f"{title} timeline (s from {origin}):")
    for when, what in sorted(marks):
        print(f"  {when - t0:+7.3f}  {what}")
    print()


def restart_scheduler(cluster: LocalCluster, steps: list[tuple[float, str]]) -> None:
    """SIGTERM, wait for the exit, start the same config again (its state file too), wait SERVING."""
    proc = cluster.scheduler
    assert proc is not None and proc.process is not None
    steps.append((time.time(), "SIGTERM sent"))
    proc.process.send_signal(signal.SIGTERM)
    proc.process.wait(timeout=60)
    steps.append((time.time(), "old process exited"))
    cluster._spawn(proc, "scheduler")
    steps.append((time.time(), "new process spawned"))
    wait_serving(proc.address, 60, proc.process)
    steps.append((time.time(), "new process SERVING (health check)"))


def scheduler_restart(args: argparse.Namespace, out: Path) -> None:
    frames = FrameSet((FRAME,), (640 * 640 * 3,), "raw", "zeros 640x640x3")
    with (
        tempfile.TemporaryDirectory() as tmp,
        LocalCluster(
            boards=3,
            time_scale=args.time_scale,
            workdir=Path(tmp),
            log_level="INFO",
            scheduler_overrides={"state_file": str(Path(tmp) / "state.json")},
        ) as cluster,
    ):
        for i in range(args.restarts):
            steps: list[tuple[float, str]] = []
            log_start = len(cluster.logs("scheduler"))
            (out / f"restart-{i}").mkdir(parents=True, exist_ok=True)
            wall0 = time.time()
            results = run_operation(
                cluster.address,
                "scheduler-restart",
                lambda steps=steps: restart_scheduler(cluster, steps),
                frames,
                args.concurrency,
                out / f"restart-{i}",
                baseline_s=2.0,
                tail_s=2.0,
                budget_s=60.0,
                modes=("scheduler",),
                log=lambda _: None,
            )
            print(table(results))
            print_timeline(f"restart {i + 1}", "SIGTERM", results[0], steps, cluster, log_start, wall0)


def _wait_gone(pid: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while handover.running(pid) and time.monotonic() < deadline:
        time.sleep(0.02)


def _stop_successor(pid_file: Path, cluster: LocalCluster) -> None:
    """The scheduler serving at the end is not our child when a handover started it: end it by pid."""
    successor = handover.read_pid(pid_file)
    if successor and cluster.scheduler is not None and successor != cluster.scheduler.pid:
        os.kill(successor, signal.SIGTERM)  # not our child: the first old process started it
        _wait_gone(successor, 30)


def hand_over(config: Path, pid_file: Path, steps: list[tuple[float, str]]) -> None:
    """``npudure scheduler --handover`` (the role's handler), then wait for the old process to exit."""
    old = handover.read_pid(pid_file)
    steps.append((time.time(), f"handover command run (old pid {old})"))
    command = [sys.executable, "-m", "npudure", "scheduler", "--config", str(config), "--handover"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"handover failed: {done.stderr.strip()}")
    steps.append((time.time(), f"handover command returned (new pid {handover.read_pid(pid_file)})"))
    if old is not None:
        _wait_gone(old, 60)
    steps.append((time.time(), "old process exited"))


def scheduler_handover(args: argparse.Namespace, out: Path) -> None:
    frames = FrameSet((FRAME,), (640 * 640 * 3,), "raw", "zeros 640x640x3")
    with tempfile.TemporaryDirectory() as tmp:
        pid_file = Path(tmp) / handover.PID_NAME
        cluster = LocalCluster(
            boards=3,
            time_scale=args.time_scale,
            workdir=Path(tmp),
            log_level="INFO",
            scheduler_overrides={"state_file": str(Path(tmp) / "state.json")},
        )
        try:
            cluster.start()
            assert cluster.scheduler is not None
            for i in range(args.restarts):
                steps: list[tuple[float, str]] = []
                log_start = len(cluster.logs("scheduler"))
                (out / f"handover-{i}").mkdir(parents=True, exist_ok=True)
                wall0 = time.time()
                config = cluster.scheduler.config_path

                def action(steps: list[tuple[float, str]] = steps, config: Path = config) -> None:
                    hand_over(config, pid_file, steps)

                results = run_operation(
                    cluster.address, "scheduler-handover", action, frames, args.concurrency,
                    out / f"handover-{i}", baseline_s=2.0, tail_s=2.0, budget_s=60.0,
                    modes=("scheduler",), log=lambda _: None,
                )  # fmt: skip
                print(table(results))
                title = f"handover {i + 1}"
                print_timeline(title, "the command", results[0], steps, cluster, log_start, wall0)
        finally:
            _stop_successor(pid_file, cluster)
            cluster.stop()


def add_board(args: argparse.Namespace, out: Path) -> None:
    frames = FrameSet((FRAME,), (640 * 640 * 3,), "raw", "zeros 640x640x3")
    with LocalCluster(boards=2, time_scale=args.time_scale) as cluster:
        assert cluster.scheduler is not None and cluster.admin_token_file is not None
        name = "board9"
        agent = cluster.add_agent(name)
        path = cluster.scheduler.config_path
        sched = yaml.safe_load(path.read_text())
        sched["boards"].append({"name": name, "address": agent.address})
        path.write_text(yaml.safe_dump(sched, sort_keys=False))
        took: list[float] = []
        (out / "add-board").mkdir(parents=True, exist_ok=True)

        def action() -> None:
            with security.channel(cluster.address) as ch, security.channel(agent.address) as board:
                node = rpc.NodeStub(board)
                start = time.monotonic()
                rpc.ClusterStub(ch).ReloadBoards(pb.ReloadBoardsRequest(), timeout=30)
                while time.monotonic() - start < 30:
                    if node.GetStatus(pb.NodeStatusRequest(), timeout=5).served_total > 0:
                        took.append(time.monotonic() - start)
                        return
                    time.sleep(0.01)
            raise RuntimeError("the added board got no request within 30 s")

        results = run_operation(
            cluster.address, "add-board", action, frames, args.concurrency, out / "add-board",
            baseline_s=2.0, tail_s=1.0, budget_s=40.0, modes=("scheduler",), log=lambda _: None,
        )  # fmt: skip
        print(table(results))
        first = f"{took[0]:.2f} s" if took else "never (within 30 s)"
        print(f"add-board: ReloadBoards call -> first request on the new board: {first} (goal < 5 s)")
        print()


def _wait_until(what: str, done, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {timeout_s:.0f} s")
        time.sleep(0.02)


def roll_agents(cluster: LocalCluster, steps: list[tuple[float, str]]) -> None:
    """Each agent in turn as roles/npudure_agent/tasks/restart.yml does it: drain through the scheduler,
    wait until it holds nothing, SIGTERM, start it again (the new code), wait until the scheduler has it
    back, undrain, wait UP."""
    with security.channel(cluster.address) as channel:
        cluster_stub = rpc.ClusterStub(channel)

        def state(name: str) -> str | None:
            return board_state(cluster_stub.GetClusterStatus(pb.ClusterStatusRequest(), timeout=5), name)

        for name, proc in cluster.agents.items():
            assert proc.process is not None
            set_drain(channel, name, True, 10)
            with security.channel(proc.address) as board:
                node = rpc.NodeStub(board)

                def idle(node: rpc.NodeStub = node) -> bool:
                    status = node.GetStatus(pb.NodeStatusRequest(), timeout=5)
                    return status.in_flight == 0 and status.queue_depth == 0

                _wait_until(f"{name} idle after its drain", idle)
            proc.process.send_signal(signal.SIGTERM)
            proc.process.wait(timeout=60)
            cluster._spawn(proc, "agent")
            wait_serving(proc.address, 60, proc.process)
            _wait_until(f"{name} DRAINING again on the scheduler", lambda n=name: state(n) == "DRAINING")
            set_drain(channel, name, False, 10)
            _wait_until(f"{name} UP on the scheduler", lambda n=name: state(n) == "UP")
            steps.append((time.time(), f"{name} rolled (pid {proc.pid})"))


def running_versions(cluster: LocalCluster) -> dict[str, str]:
    """The version each running process reports (the scheduler's and every agent's status)."""
    with security.channel(cluster.address) as channel:
        found = {
            "scheduler": rpc.ClusterStub(channel)
            .GetClusterStatus(pb.ClusterStatusRequest(), timeout=5)
            .scheduler_version
        }
    for name, proc in cluster.agents.items():
        with security.channel(proc.address) as channel:
            found[name] = rpc.NodeStub(channel).GetStatus(pb.NodeStatusRequest(), timeout=5).agent_version
    return found


def upgrade(args: argparse.Namespace, out: Path) -> None:
    frames = FrameSet((FRAME,), (640 * 640 * 3,), "raw", "zeros 640x640x3")
    new = f"{__version__}+upgrade.1"
    saved_path, saved_cwd, out = os.environ.get("PYTHONPATH"), os.getcwd(), out.resolve()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        old_src, new_src = frozen_source(_mkdir(root / "old")), frozen_source(_mkdir(root / "new"))
        init = new_src / "npudure" / "__init__.py"
        init.write_text(init.read_text().replace(f'"{__version__}"', f'"{new}"'))
        current = root / "current"  # what every process imports npudure from, like a board's venv
        current.symlink_to(old_src)
        # `python -m` puts the working folder first on sys.path: the processes start away from this tree.
        os.environ["PYTHONPATH"] = str(current)
        os.chdir(root)
        pid_file = root / handover.PID_NAME
        cluster = LocalCluster(
            boards=3,
            time_scale=args.time_scale,
            workdir=root,
            log_level="INFO",
            scheduler_overrides={"state_file": str(root / "state.json")},
        )
        try:
            cluster.start()
            assert cluster.scheduler is not None
            before = running_versions(cluster)
            steps: list[tuple[float, str]] = []
            config = cluster.scheduler.config_path
            (out / "upgrade").mkdir(parents=True, exist_ok=True)

            def action() -> None:
                steps.append((time.time(), f"sources switched to {new}"))
                current.unlink()
                current.symlink_to(new_src)
                roll_agents(cluster, steps)
                hand_over(config, pid_file, steps)

            results = run_operation(
                cluster.address, "upgrade", action, frames, args.concurrency, out / "upgrade",
                baseline_s=2.0, tail_s=2.0, budget_s=180.0, log=lambda _: None,
            )  # fmt: skip
            print(table(results))
            after = running_versions(cluster)
            print(f"upgrade: running versions {before} -> {after}")
            if set(after.values()) != {new}:
                print(f"upgrade: NOT every process runs {new}")
            t0 = steps[0][0] if steps else time.time()
            for when, what in steps:
                print(f"  {when - t0:+7.3f}  {what}")
            print()
        finally:
            _stop_successor(pid_file, cluster)
            cluster.stop()
            os.chdir(saved_cwd)
            if saved_path is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = saved_path


def _mkdir(path: Path) -> Path:
    path.mkdir()
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--restarts", type=int, default=2, help="scheduler restarts (and handovers), one after another (2)"
    )
    parser.add_argument("--concurrency", type=int, default=6, help="closed-loop requests outstanding (6)")
    parser.add_argument("--time-scale", type=float, default=3.0, help="sim agents' time scale (3.0)")
    parser.add_argument(
        "--only", choices=("restart", "handover", "add-board", "upgrade"), help="run one scenario"
    )
    parser.add_argument("--out", type=Path, default=Path("build/operations"), help="samples and JSON")
    args = parser.parse_args(argv)
    print(
        f"conditions: loopback, {os.cpu_count()} cores ({platform.machine()}, Python "
        f"{platform.python_version()}), host shared with other work; 3 sim agents (EMULATED NPU, "
        f"time_scale {args.time_scale}) and the project's scheduler as real processes; central load "
        f"(every request through the scheduler, the bench generator's waitForReady config), "
        f"concurrency {args.concurrency}, raw 640x640 frames"
    )
    print()
    if args.only in (None, "restart"):
        scheduler_restart(args, args.out)
    if args.only in (None, "handover"):
        scheduler_handover(args, args.out)
    if args.only in (None, "add-board"):
        add_board(args, args.out)
    if args.only in (None, "upgrade"):
        upgrade(args, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
