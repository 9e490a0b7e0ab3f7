"""``npudure faults run|soak``: the fault suite and the soak on the emulated fleet (root)."""

from __future__ import annotations

import argparse
import contextlib
import secrets
import signal
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from npudure import __version__
from npudure.argtypes import non_negative, positive, whole
from npudure_workshop.lab import timescale

DEFAULT_BASE = Path("results")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--boards", type=whole(1), default=3, help="emulated boards (default 3)")
    p.add_argument(
        "--out", type=Path, help="result folder to create (must not exist; default results/faults-…)"
    )
    p.add_argument(
        "--concurrency",
        type=whole(1),
        default=None,
        help="requests kept in flight (default 2 per board: moderate)",
    )
    p.add_argument("--frames", type=whole(1), default=8, help="distinct synthetic raw frames (default 8)")
    timescale.add_option(p, 10.0, "10, about 16 inf/s per board")
    p.add_argument(
        "--hang-timeout",
        type=positive,
        default=1.0,
        help="agent hang_timeout_s deployed to the boards (default 1.0; the role's default is 10)",
    )
    p.add_argument(
        "--no-provision",
        dest="provision",
        action="store_false",
        help="use the fleet as it is (converged earlier with the same settings) instead of running site.yml",
    )
    p.add_argument(
        "--keep-lab",
        action="store_true",
        help="leave a lab this command booted running (default: take it down)",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="faults_command", metavar="ACTION", required=True)
    run = sub.add_parser("run", help="inject each fault under load and print what it cost")
    _common(run)
    run.add_argument(
        "--faults",
        default="all",
        help="all, or a comma-separated list of: agent-kill, board-reboot, link-cut, slow, npu-hang, "
        "scheduler-restart (default all)",
    )
    run.add_argument(
        "--mode",
        choices=("scheduler", "proxyless"),
        default="scheduler",
        help="scheduler: the load goes through the scheduler (default); proxyless: straight to the boards "
        "on the scheduler's GetRoute (docs/proxyless.md)",
    )
    run.add_argument(
        "--baseline", type=positive, default=5.0, help="seconds of load before each fault (default 5)"
    )
    run.add_argument("--hold", type=positive, default=6.0, help="seconds a held fault stays (default 6)")
    run.add_argument(
        "--budget",
        type=positive,
        default=None,
        help="recovery budget in seconds for every fault (default: per fault)",
    )
    soak = sub.add_parser("soak", help="fixed load for N minutes; RSS and fd growth of every process")
    _common(soak)
    soak.add_argument("--minutes", type=positive, default=10.0, help="load duration (default 10)")
    soak.add_argument("--interval", type=positive, default=10.0, help="seconds between samples (default 10)")
    soak.add_argument(
        "--warmup",
        type=non_negative,
        help="seconds before growth is measured (default: a third of the run, 60 at most)",
    )
    soak.add_argument(
        "--rss-growth-pct", type=non_negative, default=20.0, help="bound on RSS growth in percent (20)"
    )
    soak.add_argument(
        "--rss-growth-mib", type=non_negative, default=50.0, help="bound on RSS growth in MiB (50)"
    )
    soak.add_argument("--fd-growth", type=whole(0), default=10, help="bound on open fd growth (10)")


def _make_out(out: Path | None, kind: str) -> Path:
    from npudure_workshop.bench.results import exists_message, mkdir_new
    from npudure_workshop.faults.fleet import FaultsError

    if out is None:
        out = (
            DEFAULT_BASE
            / f"faults-{kind}-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}-{secrets.token_hex(3)}"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    return mkdir_new(out, lambda p: FaultsError(exists_message(p, what="", fresh="one")))


@contextlib.contextmanager
def fleet_session(args: argparse.Namespace, out: Path, manifest: dict) -> Iterator:
    """A provisioned fleet for the duration of the block; a lab booted here is taken down after."""
    from npudure_workshop.faults import fleet as fleetmod

    lab, owned = fleetmod.ensure_lab(args.boards)
    fleet = None
    try:
        overrides = {
            **fleetmod.DEFAULT_OVERRIDES,
            "npudure_agent_sim_time_scale": args.time_scale,
            "npudure_agent_hang_timeout_s": args.hang_timeout,
        }
        manifest["ansible_overrides"] = overrides
        manifest["lab_booted_here"] = owned
        if args.provision:
            if lab.inventory_path is None or not lab.inventory_path.is_file():
                raise fleetmod.FaultsError(
                    "the lab has no inventory file; run `npudure lab down` and start again"
                )
            took = fleetmod.provision(lab.inventory_path, overrides, log_file=out / "site.log")
            manifest["provision_s"] = round(took, 1)
            print(f"provisioned in {took:.0f} s (log: {out / 'site.log'})")
        else:
            for board in [b.name for b in lab.boards]:
                cfg = fleetmod.read_agent_config(lab, board)
                have = (cfg.get("sim", {}).get("time_scale"), cfg.get("hang_timeout_s"))
                if have != (args.time_scale, args.hang_timeout):
                    print(
                        f"warning: {board} runs time_scale={have[0]}, hang_timeout_s={have[1]}, not "
                        f"{args.time_scale}, {args.hang_timeout}: drop --no-provision to deploy them"
                    )
        fleet = fleetmod.Fleet(lab, owned)
        ok, states = fleet.wait_all_up(90.0)
        if not ok:
            raise fleetmod.FaultsError(
                f"the scheduler at {fleet.scheduler} does not report every board UP after 90 s ({states}); "
                "check `npudure lab exec sched -- journalctl -u npudure-scheduler`"
            )
        yield fleet
    finally:
        if fleet is not None:
            fleet.close()
        if owned and not args.keep_lab:
            print("taking down the lab this command booted")
            try:
                lab.down()
            except Exception as exc:  # must not hide the run's own outcome
                print(f"npudure faults: taking the lab down failed: {exc}; run `npudure lab down`")


def _raise_interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def run(args: argparse.Namespace) -> int:
    from npudure_workshop.faults import fleet as fleetmod

    with contextlib.suppress(AttributeError, ValueError):
        sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # progress shows when piped
    reason = fleetmod.unavailable_reason()
    if reason:
        print(f"npudure faults: {reason}", file=sys.stderr)
        return 2
    if args.boards < 2:
        print(
            "npudure faults: needs at least 2 boards (a board fault must leave another board up)",
            file=sys.stderr,
        )
        return 2
    if args.faults_command == "soak" and args.minutes * 60 < 30:
        print("npudure faults: --minutes must be at least 0.5", file=sys.stderr)
        return 2
    try:
        if args.faults_command == "run":
            from npudure_workshop.faults.scenarios import parse_faults

            specs = parse_faults(args.faults)
        out = _make_out(args.out, args.faults_command)
    except (ValueError, fleetmod.FaultsError) as exc:
        print(f"npudure faults: {exc}", file=sys.stderr)
        return 2
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)  # SIGTERM restores faults like Ctrl-C
    manifest: dict = {
        "command": ["npudure", *sys.argv[1:]],
        "version": __version__,
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "_run"},
    }
    from npudure_workshop.bench.results import write_json
    from npudure_workshop.lab.host import LabError

    try:
        with fleet_session(args, out, manifest) as fleet:
            if args.faults_command == "run":
                return _run_faults(args, specs, fleet, out, manifest)
            return _run_soak(args, fleet, out, manifest)
    except (fleetmod.FaultsError, LabError, ConnectionError, TimeoutError) as exc:
        print(f"npudure faults: {exc}", file=sys.stderr)
        manifest["error"] = str(exc)
        return 1
    except KeyboardInterrupt:
        print("npudure faults: interrupted; faults restored", file=sys.stderr)
        manifest["interrupted"] = True
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
        manifest["finished"] = datetime.now(UTC).isoformat(timespec="seconds")
        write_json(out / "manifest.json", manifest)
        print(f"results: {out}")


def _frames(args: argparse.Namespace):
    from npudure_workshop.bench.payloads import make_frame_set

    return make_frame_set("raw", args.frames, seed=0)


def _run_faults(args, specs, fleet, out: Path, manifest: dict) -> int:
    from npudure_workshop.bench.results import write_json
    from npudure_workshop.faults import analysis
    from npudure_workshop.faults.runner import Suite, Timing

    concurrency = args.concurrency or 2 * len(fleet.boards)
    timing = Timing(baseline_s=args.baseline, hold_s=args.hold, recovery_budget_s=args.budget)
    manifest.update(
        {"concurrency": concurrency, "scheduler": fleet.scheduler, "boards": fleet.boards, "mode": args.mode}
    )
    started = time.monotonic()
    results = Suite(fleet, _frames(args), concurrency, timing, mode=args.mode).run(specs, out)
    text = "\n".join(
        [
            f"Fault suite on the emulated fleet ({len(fleet.boards)} boards, EMULATED NPU: sim backend, "
            f"time scale {args.time_scale:g}), closed loop at concurrency {concurrency}, mode {args.mode}: "
            + (
                f"straight to the boards on the route from {fleet.scheduler}"
                if args.mode == "proxyless"
                else f"through {fleet.scheduler}"
            ),
            "",
            analysis.table(results),
            "",
            "excluded s: injection -> scheduler reports the board not UP (scheduler-restart: -> scheduler "
            "unreachable); back s: lift (or, for agent-kill/board-reboot/scheduler-restart, injection) -> "
            "first request sent after it answered by the board; up s: -> board UP again (scheduler-restart: "
            "every board UP); req/s during: answers per second from the injection to the lift (or to back)."
            + (
                " Proxyless: excluded s and up s are the scheduler's view, not the clients' (not judged)."
                if args.mode == "proxyless"
                else ""
            ),
            f"{sum(r.passed for r in results)}/{len(results)} passed in {time.monotonic() - started:.0f} s",
        ]
    )
    print()
    print(text)
    (out / "table.txt").write_text(text + "\n")
    write_json(out / "faults.json", {"results": [r.as_dict() for r in results]})
    manifest["passed"] = all(r.passed for r in results)
    return 0 if manifest["passed"] else 1


def _run_soak(args, fleet, out: Path, manifest: dict) -> int:
    from npudure_workshop.faults.soak import Bounds, report, run_soak

    concurrency = args.concurrency or 2 * len(fleet.boards)
    bounds = Bounds(args.rss_growth_pct, args.rss_growth_mib, args.fd_growth)
    manifest.update({"concurrency": concurrency, "scheduler": fleet.scheduler, "boards": fleet.boards})
    soak = run_soak(fleet, _frames(args), concurrency, args.minutes, out, args.interval, args.warmup, bounds)
    text = (
        f"Soak on the emulated fleet ({len(fleet.boards)} boards, EMULATED NPU: sim backend, time scale "
        f"{args.time_scale:g}): {args.minutes:g} min, closed loop at concurrency {concurrency}\n\n"
        + report(soak)
    )
    print()
    print(text)
    (out / "report.txt").write_text(text + "\n")
    manifest["passed"] = soak.passed
    return 0 if soak.passed else 1
