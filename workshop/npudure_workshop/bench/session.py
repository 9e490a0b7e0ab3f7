"""A benchmark session: the Python API behind ``npudure bench``.

    from npudure_workshop.bench import BenchSession, BenchSettings

    with BenchSession("127.0.0.1:50050", settings=BenchSettings(duration_s=10)) as bench:
        sweep = bench.sweep([1, 2, 4, 8])
        bench.scaling(per_board_concurrency=sweep["operating_point"]["per_board_concurrency"])
    # leaving the block restores the cluster, releases the lease and writes summary + report

Entering takes the scheduler lease (a second harness is refused, naming the holder), creates a new
result folder (never an existing one) and remembers the cluster's policy, active boards and CPU caps;
leaving puts all of them back — also after Ctrl-C, SIGTERM (with the CLI's handler) or an exception.
The session plans experiments and numbers their runs; the parts it opens each do one job:
``ClusterHold`` (lease and restore), ``LoopBridge`` (the asyncio loop), ``TargetChoice`` (where a
run's requests go) and ``RunExecutor`` (one run, npudure_workshop/bench/run_executor.py).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from npudure import __version__
from npudure_workshop.bench import analysis, cpu, experiments, report, telemetry_log
from npudure_workshop.bench.cluster import BenchError, ClusterAdmin, ClusterGuard, active_boards, state_name
from npudure_workshop.bench.cluster_hold import ClusterHold
from npudure_workshop.bench.lease import LeaseKeeper, default_holder
from npudure_workshop.bench.loop_bridge import LoopBridge
from npudure_workshop.bench.payloads import FrameSet, make_frame_set
from npudure_workshop.bench.progress import Progress
from npudure_workshop.bench.results import (
    ResultDir,
    ResultDirExists,
    exists_message,
    read_json,
    write_csv,
    write_json,
)
from npudure_workshop.bench.run_executor import RunExecutor
from npudure_workshop.bench.runs import RunData
from npudure_workshop.bench.scheduler_cpu import SchedulerPids
from npudure_workshop.bench.settings import BenchSettings
from npudure_workshop.bench.spec import RunSpec
from npudure_workshop.bench.target_choice import TargetChoice

log = logging.getLogger(__name__)

__all__ = ["BenchSession", "BenchSettings", "RunSpec", "finalize"]


class SessionNotOpen(RuntimeError):
    """A session used outside its ``with`` block (or before ``open()``)."""


class BoardsRefused(BenchError):
    """The boards the command names are not the cluster's active ones (``board_check``): found before any
    result folder is made or run started, so a typo costs nothing."""


# What a command asks of the active boards (e.g. ``--hetero-board`` is one of them); raises ValueError.
BoardCheck = Callable[[list[str]], None]


@dataclass
class _Open:
    """What exists only while the session is open."""

    hold: ClusterHold
    bridge: LoopBridge
    targets: TargetChoice
    executor: RunExecutor


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
        board_check: BoardCheck | None = None,
    ) -> None:
        self.target = target
        self.board_check = board_check
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
        self.runs: list[RunData] = []
        self.summary: dict[str, Any] | None = None
        self.restore_problems: list[str] = []
        self.interrupted: str | None = None
        self.result: ResultDir | None = None  # kept after close: the CLI prints the summary's folder
        self.boards: list[str] = []
        self._sequence = 0
        self._series_count: dict[str, int] = {}
        self._open: _Open | None = None

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> BenchSession:
        self.open()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if exc_type is not None:
            self.interrupted = f"{exc_type.__name__}: {exc}" if str(exc) else exc_type.__name__
        self.close()

    @property
    def parts(self) -> _Open:
        if self._open is None:
            raise SessionNotOpen("the benchmark session is not open: use it in a with block")
        return self._open

    @property
    def admin(self) -> ClusterAdmin:
        return self.parts.hold.admin

    @property
    def guard(self) -> ClusterGuard:
        return self.parts.hold.guard

    @property
    def lease(self) -> LeaseKeeper:
        return self.parts.hold.lease

    @property
    def executor(self) -> RunExecutor:
        return self.parts.executor

    def open(self) -> None:
        # Refuse an existing folder before touching the cluster; create it only once the lease is ours.
        if self.out is not None and self.out.exists():
            raise ResultDirExists(exists_message(self.out))
        hold = ClusterHold.take(self.target, self.holder or default_holder(), self.settings.lease_ttl_s)
        bridge: LoopBridge | None = None
        targets: TargetChoice | None = None
        try:
            boards = active_boards(hold.status_at_start)
            if self.board_check is not None:
                try:
                    self.board_check(boards)
                except ValueError as exc:
                    raise BoardsRefused(str(exc)) from None
            self.result = ResultDir.create(self.out, self.results_base)
            self.boards = boards
            pids = SchedulerPids.find(self.target, self._scheduler_pids_arg)
            frames = self.frames = self.frames if self.frames is not None else make_frame_set()
            bridge = LoopBridge()
            targets = TargetChoice(self.target, hold.admin, self.settings, self.progress)
            bridge.run(targets.open())
            executor = RunExecutor(
                hold=hold,
                result=self.result,
                frames=frames,
                bridge=bridge,
                targets=targets,
                scheduler_pids=pids,
                settings=self.settings,
                progress=self.progress,
                cpu_probe=self.cpu_probe,
                expect_reboot=self.expect_reboot,
            )
            self._write_manifest(self.result, hold, pids, frames)
            self.progress.note(f"results -> {self.result.path}  (lease: {hold.lease.holder})")
        except BaseException:
            try:
                self._close_parts(hold, bridge, targets)
            finally:
                self._finish_report()
            raise
        self._open = _Open(hold, bridge, targets, executor)

    def close(self) -> None:
        """Restore the cluster, release the lease, write summary and report. Safe to call twice."""
        parts, self._open = self._open, None
        try:
            if parts is not None:
                self._close_parts(parts.hold, parts.bridge, parts.targets)
        finally:
            self._finish_report()

    def _close_parts(
        self, hold: ClusterHold, bridge: LoopBridge | None, targets: TargetChoice | None
    ) -> None:
        try:
            self.restore_problems = hold.release()
        finally:
            if bridge is not None:
                bridge.close(targets.close() if targets is not None else None)

    def _finish_report(self) -> None:
        try:
            if self.result is not None and (self.result.path / "manifest.json").exists():
                try:
                    self.finish()
                except Exception as exc:  # never hide the original error behind a report failure
                    log.exception("could not write the summary/report")
                    self.progress.note(f"could not write the summary/report: {exc}")
        finally:
            self.progress.close()

    def _write_manifest(
        self, result: ResultDir, hold: ClusterHold, pids: SchedulerPids, frames: FrameSet
    ) -> None:
        status = hold.status_at_start
        write_json(
            result.path / "manifest.json",
            {
                "schema": "npudure-bench-manifest/1",
                "harness_version": __version__,
                "command": self.command,
                "target": self.target,
                "started_at_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "lease_holder": hold.lease.holder,
                "settings": asdict(self.settings),
                "frames": frames.conditions(),
                "scheduler_pids": pids.pids,
                "scheduler_pid_source": pids.reason,
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
        """Plan an experiment of ``kind`` (bench.experiments), execute its runs, aggregate them.
        ``via``: the load through the scheduler, or proxyless (series named ``<kind>-proxyless``)."""
        if via not in ("scheduler", "proxyless"):
            raise ValueError(f"--mode {via!r} is not known; use scheduler, proxyless or both")
        experiment = experiments.get(kind)
        series = self.series_name(kind if via == "scheduler" else f"{kind}-{via}")
        plan = experiment.plan(experiments.PlanContext(tuple(self.boards), series, via), **params)
        if not plan.specs:  # nothing to aggregate either: say so instead of failing on an empty series
            raise BenchError(f"{plan.description}: these settings plan no run (is a repetition count 0?)")
        self.progress.experiment(plan.description, len(plan.specs))
        admin, guard = self.admin, self.guard
        policy = admin.status().policy
        try:
            for spec in plan.specs:
                self.execute(replace(spec, sequence=self.next_sequence()))
        finally:
            # The next experiment starts from the same cluster: no cap or policy left over from this one.
            guard.reset_caps()
            if admin.status().policy != policy:
                guard.set_policy(policy)
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

    def execute(self, spec: RunSpec) -> RunData:
        """One run (npudure_workshop.bench.run_executor), kept among the session's runs."""
        run = self.executor.execute(spec)
        self.runs.append(run)
        return run

    # ------------------------------------------------------------------ the end
    def finish(self) -> dict[str, Any]:
        if self.result is None:
            raise SessionNotOpen("the benchmark session was never opened: no result folder to finish")
        self.summary = finalize(
            self.result,
            {
                "finished_at_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
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
