"""``npudure agent --config /etc/npudure/agent.yml``"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from npudure import config as cfg
from npudure.backends import BackendError, create_backend
from npudure.board import soc
from npudure.security.access import ListenError, SecurityError
from npudure.service.runtime import (
    EX_CONFIG,
    add_service_arguments,
    ensure_malloc_tuning,
    load_service_config,
    setup_logging,
)

log = logging.getLogger("npudure.agent")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_service_arguments(
        parser, "agent", check_help="validate the config and load the backend and model, then exit"
    )


def run(args: argparse.Namespace) -> int:
    config = load_service_config(cfg.AgentConfig, args.config, "agent")
    if config is None:
        return EX_CONFIG
    try:
        config, board_soc = soc.resolve_npu_cores(config)
    except soc.SocMismatch as exc:
        print(f"npudure agent: {args.config}: {exc}", file=sys.stderr)
        return EX_CONFIG
    if not args.check:
        ensure_malloc_tuning()
    setup_logging(args.log_level)
    try:
        backend = create_backend(config)
    except BackendError as exc:  # unknown backend, missing model or runtime: the config names them
        print(f"npudure agent: {exc}", file=sys.stderr)
        return EX_CONFIG
    if args.check:
        print(
            f"ok: {args.config}: backend {backend.name}{' (emulated)' if backend.emulated else ''}, "
            f"{len(backend.contexts)} context(s), {board_soc.describe()}, runtime {backend.runtime_version}, "
            f"model sha256 {backend.model_sha256 or '-'}"
        )
        backend.close()
        return 0
    from npudure.agent.server import serve

    try:
        asyncio.run(serve(config, backend, board_soc=board_soc))
    except (BackendError, SecurityError) as exc:
        print(f"npudure agent: {exc}", file=sys.stderr)
        return EX_CONFIG
    except ListenError as exc:
        print(f"npudure agent: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0
