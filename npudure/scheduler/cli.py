"""``npudure scheduler --config /etc/npudure/scheduler.yml``"""

from __future__ import annotations

import argparse
import asyncio
import sys

from npudure import config as cfg
from npudure.security.access import ListenError, SecurityError
from npudure.service.runtime import EX_CONFIG, LOG_LEVELS, ensure_malloc_tuning, setup_logging


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", required=True, help="scheduler YAML config (e.g. /etc/npudure/scheduler.yml)"
    )
    parser.add_argument("--check", action="store_true", help="validate the config and exit")
    parser.add_argument(
        "--log-level", default="INFO", type=str.upper, choices=LOG_LEVELS, help="log verbosity (default INFO)"
    )


def run(args: argparse.Namespace) -> int:
    try:
        config = cfg.load(cfg.SchedulerConfig, args.config)
    except cfg.ConfigError as exc:
        print(f"npudure scheduler: {exc}", file=sys.stderr)
        return EX_CONFIG
    if args.check:
        print(f"ok: {args.config}: {len(config.boards)} boards, policy {config.policy}")
        return 0
    ensure_malloc_tuning()
    setup_logging(args.log_level)
    from npudure.scheduler.server import StartupError, serve

    try:
        asyncio.run(serve(config))
    except SecurityError as exc:
        print(f"npudure scheduler: {exc}", file=sys.stderr)
        return EX_CONFIG
    except (StartupError, ListenError) as exc:
        print(f"npudure scheduler: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0
