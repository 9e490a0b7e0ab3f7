"""A benchmark session: the Python API behind ``npudure bench``.

    from npudure.bench import BenchSession, BenchSettings

    with BenchSession("127.0.0.1:50050", settings=BenchSettings(duration_s=10)) as bench:
        sweep = bench.sweep([1, 2, 4, 8])
        bench.scaling(per_board_concurrency=sweep["operating_point"]["per_board_concurrency"])
    # leaving the block restores the cluster, releases the lease and writes summary + report

Entering takes the scheduler lease (a second harness is refused, naming the holder), creates a new
result folder (never an existing one) and remembers the cluster's policy, active boards and CPU caps;
leaving puts all of them back — also after Ctrl-C, SIGTERM (with the CLI's handler) or an exception.
Each run: configure → snapshot boot ids → start the 1 s telemetry thread → load → drain → stop
telemetry → snapshot again → write raw files → summarize from those files.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import time
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from npudure import __version__
from npudure.bench import agent_cpu, analysis, cpu, experiments, report, telemetry_log
from npudure.bench.cluster import BenchError, ClusterAdmin, ClusterGuard, active_boards, state_name
from npudure.bench.lease import DEFAULT_TTL_S, LeaseKeeper, default_holder
from npudure.bench.load import LoadResult, LoadTarget, Target, closed_loop, open_loop
from npudure.bench.payloads import FrameSet, make_frame_set
from npudure.bench.progress import Progress
from npudure.bench.results import ResultDir, ResultDirExists, read_json, write_csv, write_json
from npudure.bench.runs import RunData, load_run
from npudure.bench.spec import VIAS, RunSpec
from npudure.bench.terminal import run_line
from npudure.client.proxyless import RouteError, RouteInfo, channel_options, fetch_route
from npudure.proto import inference_pb2 as pb

log = logging.getLogger(__name__)


@dataclass
class BenchSettings:
    warmup_s: float = 2.0
    duration_s: float = 10.0
    # A run lasts at least duration_s AND until this many successful measured requests exist
    # (bounded by max_duration_s), so slow clusters still give ≥ 100 samples per run.
    min_samples: int = 100
    max_duration_s: float | None = None
    timeout_s: float = 30.0
    harness_connections: int = 2
    telemetry_interval_s: float = 1.0
    # Ask each board's agent directly for telemetry (fresh); else only the scheduler's cached copy.
    direct_telemetry: bool = True
    settle_s: float = 0.3  # pause between runs (each run is drained already; lets the boards idle)
    board_up_wait_s: float = 15.0
    lease_ttl_s: float = DEFAULT_TTL_S
    open_loop_max_outstanding: int = 256
    # "grpc", or "http": the DeepStack-compatible HTTP API at http_url (npudure/bench/http_load.py).
    api: str = "grpc"
    http_url: str | None = None


def _parse_target_port(target: str) -> tuple[str, int | None]:
    host, _, port = target.rpartition(":")
    return host, int(port) if port.isdigit() else None


def _is_local_host(host: str) -> bool:
    return host in ("localhost", "127.0.0.1", "::1", "[::1]", "0.0.0.0") or host.startswith("127.")


class BenchSession:
    def __init__(
        self,
        target: str,
        out: str | Path | None = None,
        settings: BenchSettings | None = None,
        frames: FrameSet | None = None,
        scheduler_pids: list[int] | None = None,
        cpu_probe: cpu.CpuProbe = cpu.harness_cpu_sample,
        holder: str | None = None,
        progress: str = "auto",
        command: list[str] | None = None,
        results_base: Path | None = None,
        expect_reboot: tuple[str, ...] = (),
    ) -> None:
        self.target = target
        # Boards the caller will reboot (or take away) during the runs (a fault suite): noted, not invalid.
        self.expect_reboot = tuple(expect_reboot)
        self.out = Path(out) if out else None
        self.settings = settings or BenchSettings()
        self.frames = frames
        self.cpu_probe = cpu_probe
        self.holder = holder
        self.command = command if command is not None else list(sys.argv)
        self.results_base = results_base or Path("results")
        self.progress = Progress(progress)
        self._scheduler_pids_arg = scheduler_pids
        self.scheduler_pids: list[int] = []
        self.scheduler_pid_reason = ""
        self.runs: list[RunData] = []
        self.summary: dict[str, Any] | None = None
        self.restore_problems: list[str] = []
        self.interrupted: str | None = None
        self._sequence = 0
        self._series_count: dict[str, int] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._target: LoadTarget | None = None
        self.admin: ClusterAdmin | None = None
        self.lease: LeaseKeeper | None = None
        self.guard: ClusterGuard | None = None
        self.result: ResultDir | None = None
        self.boards: list[str] = []
        self.started_at = ""

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> BenchSession:
        self.open()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if exc_type is not None:
            self.interrupted = f"{exc_type.__name__}: {exc}" if str(exc) else exc_type.__name__
        self.close()

    def open(self) -> None:
        # Refuse an existing folder before touching the cluster; create it only once the lease is ours.
        if self.out is not None and self.out.exists():
            raise ResultDirExists(
                f"result folder {self.out} already exists: results are never written into an existing "
                "folder. Pass a new --out, or leave --out out for a fresh results/<UTC time>-<id>/ folder"
            )
        self.admin = ClusterAdmin(self.target)
        try:
            status = self.admin.status()
            self.lease = LeaseKeeper(self.admin, self.holder or default_holder(), self.settings.lease_ttl_s)
            self.lease.acquire()
        except BaseException:
            self.admin.close()
            raise
        try:
            self.result = ResultDir.create(self.out, self.results_base)
            self.guard = ClusterGuard(self.admin)
            self.boards = active_boards(status)
            self._find_scheduler_pids()
            if self.frames is None:
                self.frames = make_frame_set()
            self._loop = asyncio.new_event_loop()
            self._target = Target(self.target, self.settings.harness_connections)
            if self.settings.api == "http":
                from npudure.bench.http_load import HttpTarget

                assert self.settings.http_url, "api http needs http_url"
                self._target = HttpTarget(self.settings.http_url, self.settings.harness_connections)
            self._loop.run_until_complete(self._target.open())
            self.started_at = datetime.now(UTC).isoformat(timespec="seconds")
            self._write_manifest(status)
            self.progress.note(f"results -> {self.result.path}  (lease: {self.lease.holder})")
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Restore the cluster, release the lease, write summary and report. Safe to call twice."""
        try:
            if self.guard is not None:
                self.restore_problems = self.guard.restore()
                self.guard = None
        finally:
            if self.lease is not None:
                self.lease.release()
                self.lease = None
            self._close_loop()
            if self.admin is not None:
                self.admin.close()
                self.admin = None
            if self.result is not None and (self.result.path / "manifest.json").exists():
                try:
                    self.finish()
                except Exception as exc:  # never hide the original error behind a report failure
                    log.exception("could not write the summary/report")
                    self.progress.note(f"could not write the summary/report: {exc}")
            self.progress.close()

    def _close_loop(self) -> None:
        loop, self._loop = self._loop, None
        if loop is None:
            return
        with contextlib.suppress(Exception):
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            if self._target is not None:
                loop.run_until_complete(self._target.close())
        self._target = None
        loop.close()

    def _find_scheduler_pids(self) -> None:
        if self._scheduler_pids_arg:
            self.scheduler_pids = list(self._scheduler_pids_arg)
            self.scheduler_pid_reason = "given"
            return
        host, port = _parse_target_port(self.target)
        if _is_local_host(host) and port:
            pids = [p for p in cpu.pids_listening_on(port) if p != os.getpid()]
            if pids:
                self.scheduler_pids = pids
                self.scheduler_pid_reason = f"found listening on port {port}"
                return
            self.scheduler_pid_reason = f"no process found listening on local port {port}"
        else:
            self.scheduler_pid_reason = (
                f"the scheduler runs on another host ({host}); its CPU is not in ClusterStatus. Run the "
                "harness on the scheduler host or pass --scheduler-pid"
            )

    def _write_manifest(self, status: pb.ClusterStatus) -> None:
        assert self.result is not None and self.frames is not None
        write_json(
            self.result.path / "manifest.json",
            {
                "schema": "npudure-bench-manifest/1",
                "harness_version": __version__,
                "command": self.command,
                "target": self.target,
                "started_at_utc": self.started_at,
                "lease_holder": self.lease.holder if self.lease else None,
                "settings": asdict(self.settings),
                "frames": self.frames.conditions(),
                "scheduler_pids": self.scheduler_pids,
                "scheduler_pid_source": self.scheduler_pid_reason,
                "cluster_at_start": {
                    "policy": status.policy,
                    "scheduler_version": status.scheduler_version,
                    "connections_per_board": status.connections_per_board,
                    "boards": [
                        {"name": b.name, "address": b.address, "state": state_name(b.state)}
                        for b in status.boards
                    ],
                },
            },
        )

    # ------------------------------------------------------------------ experiments
    def series_name(self, kind: str) -> str:
        n = self._series_count.get(kind, 0) + 1
        self._series_count[kind] = n
        return kind if n == 1 else f"{kind}-{n}"

    def next_sequence(self) -> int:
        self._sequence += 1
        return self._sequence

    def run(self, kind: str, via: str = "scheduler", **params: Any) -> dict[str, Any]:
        """Plan an experiment of ``kind`` (npudure.bench.experiments), execute its runs, aggregate them.
        ``via``: the load through the scheduler, or proxyless (series named ``<kind>-proxyless``)."""
        if via not in ("scheduler", "proxyless"):
            raise ValueError(f"--mode {via!r} is not known; use scheduler, proxyless or both")
        experiment = experiments.get(kind)
        series = self.series_name(kind if via == "scheduler" else f"{kind}-{via}")
        plan = experiment.plan(experiments.PlanContext(tuple(self.boards), series, via), **params)
        self.progress.experiment(plan.description, len(plan.specs))
        assert self.admin and self.guard
        policy = self.admin.status().policy
        try:
            for spec in plan.specs:
                self.execute(replace(spec, sequence=self.next_sequence()))
        finally:
            # The next experiment starts from the same cluster: no cap or policy left over from this one.
            self.guard.reset_caps()
            if self.admin.status().policy != policy:
                self.guard.set_policy(policy)
        agg = self.aggregate(series)
        for warning in agg["warnings"]:
            self.progress.note(f"warning: {warning}")
        return agg

    def sweep(
        self, per_board_concurrencies: list[int], repetitions: int = 1, boards: list[str] | None = None
    ) -> dict[str, Any]:
        return self.run("sweep", per_board=per_board_concurrencies, repetitions=repetitions, boards=boards)

    def scaling(
        self, per_board_concurrency: int, repetitions: int = 3, boards_max: int | None = None
    ) -> dict[str, Any]:
        return self.run(
            "scaling", per_board=per_board_concurrency, repetitions=repetitions, boards_max=boards_max
        )

    def hetero(
        self,
        per_board_concurrency: int,
        ladder: list[int],
        policies: list[str],
        board: str | None = None,
        repetitions: int = 1,
    ) -> dict[str, Any]:
        return self.run(
            "hetero",
            per_board=per_board_concurrency,
            ladder=ladder,
            policies=policies,
            board=board,
            repetitions=repetitions,
        )

    def openloop(
        self,
        rates: list[float],
        arrival: str = "poisson",
        seed: int = 0,
        repetitions: int = 1,
        boards: list[str] | None = None,
    ) -> dict[str, Any]:
        return self.run(
            "openloop", rates=rates, arrival=arrival, seed=seed, repetitions=repetitions, boards=boards
        )

    def aggregate(self, series: str) -> dict[str, Any]:
        return analysis.aggregate([r for r in self.runs if r.spec["series"] == series])

    # ------------------------------------------------------------------ one run
    def expected_run_s(self) -> float:
        return self.settings.warmup_s + self.settings.duration_s

    def execute(self, spec: RunSpec) -> RunData:
        assert self.admin and self.guard and self.result and self.frames and self._loop and self._target
        if self.expect_reboot:
            spec = replace(spec, expect_reboot=tuple(sorted({*spec.expect_reboot, *self.expect_reboot})))
        self._configure(spec)
        target, load_target = self._loop.run_until_complete(self._open_target(spec))
        try:
            return self._execute(spec, target, load_target)
        finally:
            if target is not self._target:
                self._loop.run_until_complete(target.close())

    def _execute(self, spec: RunSpec, target: LoadTarget, load_target: dict[str, Any]) -> RunData:
        assert self.admin and self.result and self._loop
        before = self._snapshot(spec.boards)
        sched_before = {pid: cpu.process_cpu_s(pid) for pid in self.scheduler_pids}
        host_before = cpu.host_cpu_busy_s()
        self.progress.run_started(spec.run_id, self.expected_run_s())
        t0 = time.perf_counter()
        sampler = telemetry_log.TelemetrySampler(
            self.admin, spec.run_id, t0, self.settings.telemetry_interval_s, self.settings.direct_telemetry
        ).start()
        try:
            result = self._loop.run_until_complete(self._load(spec, t0, target))
        finally:
            rows = sampler.stop()
        after = self._snapshot(spec.boards)
        meta = self._meta(spec, t0, result, before, after, sched_before, host_before, sampler)
        meta["load_target"] = load_target
        folder = self.result.run_dir(spec.run_id)
        result.samples.save(folder / "samples.npz")
        write_csv(folder / "telemetry.csv", rows, telemetry_log.columns(rows))
        write_json(folder / "run.json", meta)
        run = load_run(self.result, spec.run_id)
        self.runs.append(run)
        self.progress.run_done(run_line(run.summary))
        if self.settings.settle_s > 0:
            time.sleep(self.settings.settle_s)
        return run

    async def _open_target(self, spec: RunSpec) -> tuple[LoadTarget, dict[str, Any]]:
        """Where this run's requests go: the scheduler (kept open), one agent, or the boards themselves
        balanced by gRPC over the scheduler's route (proxyless); opened per run since the route follows
        the active set."""
        assert self._target is not None and self.admin is not None
        if spec.via == "scheduler":
            return self._target, {"via": "scheduler", "target": self.target, "api": self.settings.api}
        addresses = {b.name: b.address for b in self.admin.status().boards}
        missing = [b for b in spec.boards if b not in addresses]
        if missing:
            raise BenchError(f"the scheduler does not know board(s) {', '.join(missing)}")
        if spec.via == "agent":
            if len(spec.boards) != 1:
                raise ValueError("a run straight at an agent loads exactly one board")
            target = Target(addresses[spec.boards[0]], self.settings.harness_connections)
            info: dict[str, Any] = {"via": "agent", "target": target.address}
        elif spec.via == "proxyless":
            route = self._route(spec.boards)
            target = Target(route.target, self.settings.harness_connections, options=channel_options(route))
            info = {
                "via": "proxyless",
                "target": route.target,
                "route_version": route.version,
                "route_boards": [list(b) for b in route.boards],
                "service_config": route.service_config_json,
            }
        else:
            raise ValueError(f"unknown load path {spec.via!r}; use one of: {', '.join(VIAS)}")
        await target.open()
        return target, info

    def _route(self, boards: tuple[str, ...]) -> RouteInfo:
        """The scheduler's route (GetRoute), once it lists exactly the boards this run asks for: the
        active set just changed, and a board enters the rotation when its agent reports SERVING."""
        deadline = time.monotonic() + self.settings.board_up_wait_s
        while True:
            try:
                route = fetch_route(self.target)
            except RouteError as exc:
                raise BenchError(str(exc)) from None
            listed = sorted(name for name, _ in route.boards)
            if listed == sorted(boards) or time.monotonic() >= deadline:
                if listed != sorted(boards):
                    self.progress.note(
                        f"warning: the scheduler's route lists {', '.join(listed) or 'no board'}, not "
                        f"{', '.join(boards)}; running anyway (the run will be marked invalid)"
                    )
                return route
            time.sleep(0.2)

    async def _load(self, spec: RunSpec, t0: float, target: LoadTarget) -> LoadResult:
        assert self.frames is not None
        s = self.settings
        if spec.mode == "open":
            assert spec.rate is not None
            return await open_loop(
                target,
                self.frames.requests,
                spec.rate,
                s.warmup_s,
                s.duration_s,
                spec.arrival or "poisson",
                spec.seed,
                s.open_loop_max_outstanding,
                s.timeout_s,
                self.cpu_probe,
                self.progress.tick,
                t0=t0,
                min_samples=s.min_samples,
            )
        assert spec.concurrency is not None
        return await closed_loop(
            target,
            self.frames.requests,
            spec.concurrency,
            s.warmup_s,
            s.duration_s,
            s.min_samples,
            s.max_duration_s,
            s.timeout_s,
            self.cpu_probe,
            self.progress.tick,
            t0=t0,
        )

    def _configure(self, spec: RunSpec) -> None:
        assert self.admin and self.guard
        status = self.admin.status()
        if set(active_boards(status)) != set(spec.boards):
            self.guard.set_active(list(spec.boards))
        if spec.policy and status.policy != spec.policy:
            self.guard.set_policy(spec.policy)
        for board, mhz in spec.caps.items():
            self.guard.set_cap(board, mhz)
        self._wait_up(spec.boards)

    def _wait_up(self, boards: tuple[str, ...]) -> None:
        assert self.admin
        deadline = time.monotonic() + self.settings.board_up_wait_s
        while True:
            states = {b.name: b.state for b in self.admin.status().boards}
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
        assert self.admin
        status = self.admin.status()
        boot_ids: dict[str, str | None] = {}
        stage_cpu: dict[str, dict[str, float] | None] = {}
        for b in status.boards:
            if b.name not in boards:
                continue
            node = self.admin.node_status(b.address) if self.settings.direct_telemetry else None
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
        t0: float,
        result: LoadResult,
        before: dict[str, Any],
        after: dict[str, Any],
        sched_before: dict[int, float | None],
        host_before: cpu.HostCpu | None,
        sampler: telemetry_log.TelemetrySampler,
    ) -> dict[str, Any]:
        assert self.lease and self.frames
        wall = result.wall_s
        gen = {**result.generator_cpu(), "cpu_count": os.cpu_count() or 1}
        if self.scheduler_pids:
            fracs = {}
            for pid, start in sched_before.items():
                end = cpu.process_cpu_s(pid)
                fracs[str(pid)] = (
                    (end - start) / wall if (start is not None and end is not None and wall > 0) else None
                )
            sched = {
                "status": "measured",
                "fraction_of_core_by_pid": fracs,
                "pid_source": self.scheduler_pid_reason,
            }
        else:
            sched = {"status": "unknown", "reason": self.scheduler_pid_reason}
        host_after = cpu.host_cpu_busy_s()
        host = None
        if host_before and host_after and host_after[1] > host_before[1]:
            host = (host_after[0] - host_before[0]) / (host_after[1] - host_before[1])
        lease_problem = self.lease.lost_during(t0, t0 + wall)
        return {
            "schema": "npudure-bench-run/1",
            "spec": {**asdict(spec), "boards": list(spec.boards)},
            "settings": asdict(self.settings),
            "frames": self.frames.conditions(),
            "t0_unix_s": time.time() - (time.perf_counter() - t0),
            "window_start_s": result.window_start_s,
            "window_end_s": result.window_end_s,
            "samples_total": len(result.samples),
            "responses_ok_total": int(result.samples.ok.sum()),
            "error_messages": result.error_messages,
            "generator_cpu": gen,
            "scheduler_cpu": sched,
            "host_cpu_busy_fraction": host,
            "host_cpu": cpu.host_window(host_before, host_after, shared=bool(self.scheduler_pids)),
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
            "lease_problem": lease_problem,
            "telemetry_errors": sampler.errors[:20],
            "schedule": result.schedule,
        }

    # ------------------------------------------------------------------ the end
    def finish(self) -> dict[str, Any]:
        assert self.result is not None
        self.summary = finalize(
            self.result,
            {
                "finished_at_utc": datetime.now(UTC).isoformat(timespec="seconds"),
                "interrupted": self.interrupted,
                "restore_problems": self.restore_problems,
            },
        )
        return self.summary


def finalize(result: ResultDir, manifest_updates: dict[str, Any] | None = None) -> dict[str, Any]:
    """Summary, CSVs, report and plots, all computed from the raw files in the result folder."""
    summary, tables, runs = analysis.build_summary(result)
    for name, rows in tables.items():
        cols = telemetry_log.columns(rows) if name == "telemetry.csv" else None
        write_csv(result.path / name, rows, cols)
    write_json(result.path / "summary.json", summary)
    manifest_path = result.path / "manifest.json"
    manifest = read_json(manifest_path)
    manifest.update(manifest_updates or {})
    write_json(manifest_path, manifest)
    report.write_report(result.path, summary, runs, manifest)
    return summary
