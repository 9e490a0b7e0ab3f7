"""``npudure scheduler --config /etc/npudure/scheduler.yml``"""

from __future__ import annotations

import argparse
import asyncio
import sys

from npudure import config as cfg
from npudure.security.access import ListenError, SecurityError
from npudure.service import memprofile
from npudure.service.handover import AlreadyRunning, report_failure
from npudure.service.runtime import (
    EX_CONFIG,
    SCHEDULER_MALLOC_TUNING,
    add_service_arguments,
    ensure_malloc_tuning,
    load_service_config,
    setup_logging,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_service_arguments(parser, "scheduler", check_help="validate the config and exit")
    parser.add_argument(
        "--reload",
        action="store_true",
        help="validate the config and have the running scheduler apply its board set (ExecReload)",
    )
    parser.add_argument(
        "--handover",
        action="store_true",
        help="validate the config and have the running scheduler hand its port over to a new process "
        "(new code, certificates and settings) without a gap; waits until the new one serves",
    )
    parser.add_argument(
        "--memory-profile",
        type=float,
        metavar="SECONDS",
        help=f"log the top Python memory growers every SECONDS (tracemalloc; or {memprofile.ENV})",
    )


def run(args: argparse.Namespace) -> int:
    if args.reload:
        from npudure.scheduler import reload

        return reload.run(args.config)
    if args.handover:
        from npudure.scheduler import handover

        return handover.run(args.config)
    config = load_service_config(cfg.SchedulerConfig, args.config, "scheduler")
    if config is None:
        return EX_CONFIG
    if args.check:
        print(f"ok: {args.config}: {len(config.boards)} boards, policy {config.policy}")
        return 0
    try:
        profile_s = memprofile.interval_from(args.memory_profile)
    except ValueError as exc:
        print(f"npudure scheduler: {exc}", file=sys.stderr)
        return 2
    ensure_malloc_tuning(SCHEDULER_MALLOC_TUNING)
    setup_logging(args.log_level)
    from npudure.scheduler.server import StartupError, serve

    try:
        asyncio.run(memprofile.run_with_profile(serve(config, config_path=args.config), profile_s))
    except SecurityError as exc:
        return _failed(str(exc), EX_CONFIG)
    except (StartupError, ListenError, AlreadyRunning) as exc:
        return _failed(str(exc), 1)
    except KeyboardInterrupt:
        pass
    return 0


def _failed(message: str, code: int) -> int:
    """Say why on stderr (the journal) and, as a handover's successor, to the process that waits."""
    print(f"npudure scheduler: {message}", file=sys.stderr)
    report_failure(message)
    return code
