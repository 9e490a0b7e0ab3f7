"""One benchmark run, start to end: configure the cluster, snapshot boot ids, start the 1 s telemetry
thread, load, drain, stop telemetry, snapshot again, write the raw files, summarize from those files."""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, replace
from typing import Any

from npudure.proto import inference_pb2 as pb
from npudure_workshop.bench import agent_cpu, cpu, telemetry_log
from npudure_workshop.bench.cluster import active_boards, state_name
from npudure_workshop.bench.cluster_hold import ClusterHold
from npudure_workshop.bench.load import LoadResult, LoadTarget, closed_loop, open_loop
from npudure_workshop.bench.loop_bridge import LoopBridge
from npudure_workshop.bench.payloads import FrameSet
from npudure_workshop.bench.progress import Progress
from npudure_workshop.bench.results import ResultDir, write_csv, write_json
from npudure_workshop.bench.runs import RunData, load_run
from npudure_workshop.bench.scheduler_cpu import SchedulerPids
from npudure_workshop.bench.settings import BenchSettings
from npudure_workshop.bench.spec import RunSpec
from npudure_workshop.bench.target_choice import TargetChoice
from npudure_workshop.bench.terminal import run_line


@dataclass(frozen=True)
class _Start:
    """What a run measures before its load, to take differences against after it."""

    t0: float
    cluster: dict[str, Any]
    scheduler_cpu_s: dict[int, float | None]
    host_cpu: cpu.HostCpu | None


@dataclass
class RunExecutor:
    """Everything a run needs, built by the open session; ``execute`` runs one spec."""

    hold: ClusterHold
    result: ResultDir
    frames: FrameSet
    bridge: LoopBridge
    targets: TargetChoice
    scheduler_pids: SchedulerPids
    settings: BenchSettings
    progress: Progress
    cpu_probe: cpu.CpuProbe
    # Boards the caller will reboot (or take away) during the runs (a fault suite): noted, not invalid.
    expect_reboot: tuple[str, ...] = ()

    def execute(self, spec: RunSpec) -> RunData:
        if self.expect_reboot:
            spec = replace(spec, expect_reboot=tuple(sorted({*spec.expect_reboot, *self.expect_reboot})))
        self.configure(spec)
        chosen = self.bridge.run(self.targets.for_run(spec))
        try:
            return self._measure(spec, chosen.target, chosen.info)
        finally:
            self.bridge.run(self.targets.done(chosen))

    def configure(self, spec: RunSpec) -> None:
        """The run's active set, policy and CPU caps, then a wait for its boards to be UP."""
        guard = self.hold.guard
        status = self.hold.admin.status()
        if set(active_boards(status)) != set(spec.boards):
            guard.set_active(list(spec.boards))
        if spec.policy and status.policy != spec.policy:
            guard.set_policy(spec.policy)
        for board, mhz in spec.caps.items():
            guard.set_cap(board, mhz)
        self._wait_up(spec.boards)

    def _measure(self, spec: RunSpec, target: LoadTarget, load_target: dict[str, Any]) -> RunData:
        cluster = self._snapshot(spec.boards)
        scheduler_cpu_s = self.scheduler_pids.cpu_s()
        host_cpu = cpu.host_cpu_busy_s()
        self.progress.run_started(spec.run_id, self.settings.expected_run_s)
        start = _Start(time.perf_counter(), cluster, scheduler_cpu_s, host_cpu)
        sampler = telemetry_log.TelemetrySampler(
            self.hold.admin,
            spec.run_id,
            start.t0,
            self.settings.telemetry_interval_s,
            self.settings.direct_telemetry,
        ).start()
        try:
            result = self.bridge.run(self._load(spec, start.t0, target))
        finally:
            rows = sampler.stop()
        meta = self._meta(spec, start, result, self._snapshot(spec.boards), sampler)
        meta["load_target"] = load_target
        folder = self.result.run_dir(spec.run_id)
        result.samples.save(folder / "samples.npz")
        write_csv(folder / "telemetry.csv", rows, telemetry_log.columns(rows))
        write_json(folder / "run.json", meta)
        run = load_run(self.result, spec.run_id)
        self.progress.run_done(run_line(run.summary))
        if self.settings.settle_s > 0:
            time.sleep(self.settings.settle_s)
        return run

    async def _load(self, spec: RunSpec, t0: float, target: LoadTarget) -> LoadResult:
        s = self.settings
        common: dict[str, Any] = {
            "warmup_s": s.warmup_s,
            "duration_s": s.duration_s,
            "min_samples": s.min_samples,
            "max_duration_s": s.max_duration_s,
            "timeout_s": s.timeout_s,
            "cpu_probe": self.cpu_probe,
            "progress": self.progress.tick,
            "t0": t0,
        }
        if spec.mode == "open":
            if spec.rate is None:
                raise ValueError(f"open-loop run {spec.run_id} has no rate")
            return await open_loop(
                target,
                self.frames.requests,
                spec.rate,
                arrival=spec.arrival or "poisson",
                seed=spec.seed,
                max_outstanding=s.open_loop_max_outstanding,
                **common,
            )
        if spec.concurrency is None:
            raise ValueError(f"closed-loop run {spec.run_id} has no concurrency")
        return await closed_loop(target, self.frames.requests, spec.concurrency, **common)

    def _wait_up(self, boards: tuple[str, ...]) -> None:
        deadline = time.monotonic() + self.settings.board_up_wait_s
        while True:
            states = {b.name: b.state for b in self.hold.admin.status().boards}
            not_up = [b for b in boards if states.get(b) != pb.BOARD_STATE_UP]
            if not not_up:
                return
            if time.monotonic() >= deadline:
                named = ", ".join(f"{b}={state_name(states.get(b, 0))}" for b in not_up)
                self.progress.note(
                    f"warning: {named} not UP after {self.settings.board_up_wait_s:.0f}s; running anyway "
                    "(the run will be marked invalid)"
                )
                return
            time.sleep(0.2)

    def _snapshot(self, boards: tuple[str, ...]) -> dict[str, Any]:
        """Boot ids (from each board itself, else the scheduler's copy) and the scheduler's counters."""
        admin = self.hold.admin
        status = admin.status()
        boot_ids: dict[str, str | None] = {}
        stage_cpu: dict[str, dict[str, float] | None] = {}
        for b in status.boards:
            if b.name not in boards:
                continue
            node = admin.node_status(b.address) if self.settings.direct_telemetry else None
            # Stage CPU only from the board itself: the scheduler's copy may be a poll old.
            stage_cpu[b.name] = agent_cpu.counters(node)
            if node is None and b.HasField("last_status"):
                node = b.last_status
            boot_ids[b.name] = node.boot_id if node is not None and node.boot_id else None
        return {
            "boot_ids": boot_ids,
            "stage_cpu": stage_cpu,
            "served_total": status.served_total,
            "policy": status.policy,
            "connections_per_board": status.connections_per_board,
            "scheduler_version": status.scheduler_version,
            "lease_holder": status.lease_holder,
            "states": {b.name: state_name(b.state) for b in status.boards},
        }

    def _meta(
        self,
        spec: RunSpec,
        start: _Start,
        result: LoadResult,
        after: dict[str, Any],
        sampler: telemetry_log.TelemetrySampler,
    ) -> dict[str, Any]:
        wall = result.wall_s
        before = start.cluster
        host_after = cpu.host_cpu_busy_s()
        host = None
        host_before = start.host_cpu
        if host_before and host_after and host_after[1] > host_before[1]:
            host = (host_after[0] - host_before[0]) / (host_after[1] - host_before[1])
        return {
            "schema": "npudure-bench-run/1",
            "spec": {**asdict(spec), "boards": list(spec.boards)},
            "settings": asdict(self.settings),
            "frames": self.frames.conditions(),
            "t0_unix_s": time.time() - (time.perf_counter() - start.t0),
            "window_start_s": result.window_start_s,
            "window_end_s": result.window_end_s,
            "samples_total": len(result.samples),
            "responses_ok_total": int(result.samples.ok.sum()),
            "error_messages": result.error_messages,
            "replayed_after_server_stop": result.replayed,
            "generator_cpu": {**result.generator_cpu(), "cpu_count": os.cpu_count() or 1},
            "scheduler_cpu": self.scheduler_pids.window(start.scheduler_cpu_s, wall),
            "host_cpu_busy_fraction": host,
            "host_cpu": cpu.host_window(
                host_before,
                host_after,
                shared=bool(self.scheduler_pids.pids),
                max_steal=self.settings.max_steal_fraction,
            ),
            "agent_cpu_ms_per_frame": {
                b: agent_cpu.per_frame_ms(before["stage_cpu"].get(b), after["stage_cpu"].get(b))
                for b in spec.boards
            },
            "boot_ids_before": before["boot_ids"],
            "boot_ids_after": after["boot_ids"],
            "cluster_before": {
                k: before[k]
                for k in ("policy", "connections_per_board", "scheduler_version", "lease_holder", "states")
            },
            "cluster_after": {k: after[k] for k in ("policy", "lease_holder", "states")},
            "cluster_served_before": before["served_total"],
            "cluster_served_after": after["served_total"],
            "lease_problem": self.hold.lease.lost_during(start.t0, start.t0 + wall),
            "telemetry_errors": sampler.errors[:20],
            "schedule": result.schedule,
        }
