"""``npudure agent --config /etc/npudure/agent.yml``"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from npudure import config as cfg
from npudure.agent import selftest
from npudure.backends import Backend, BackendError, contexts, create_backend
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
        count = contexts.resolve(config, board_soc)
    except soc.SocMismatch as exc:
        print(f"npudure agent: {args.config}: {exc}", file=sys.stderr)
        return EX_CONFIG
    except BackendError as exc:  # a bad count recorded beside the model
        print(f"npudure agent: {exc}", file=sys.stderr)
        return EX_CONFIG
    if not args.check:
        ensure_malloc_tuning()
    setup_logging(args.log_level)
    try:
        backend = create_backend(config, count.count)
    except BackendError as exc:  # unknown backend, missing model or runtime, too little memory
        print(f"npudure agent: {exc}", file=sys.stderr)
        return EX_CONFIG
    try:
        passed = _self_test(config, backend)
    except (selftest.SelfTestFailed, BackendError) as exc:
        print(f"npudure agent: {exc}", file=sys.stderr)
        backend.close()
        return EX_CONFIG
    log.info("%s", passed.describe())
    if args.check:
        print(
            f"ok: {args.config}: backend {backend.name}{' (emulated)' if backend.emulated else ''}, "
            f"{len(backend.contexts)} context(s) ({count.source}), {board_soc.describe()}, "
            f"runtime {backend.runtime_version}, model sha256 {backend.model_sha256 or '-'}, "
            f"{passed.describe()}"
        )
        backend.close()
        return 0
    from npudure.agent.server import serve

    try:
        asyncio.run(serve(config, backend, board_soc=board_soc, contexts_source=count.source))
    except (BackendError, SecurityError) as exc:
        print(f"npudure agent: {exc}", file=sys.stderr)
        return EX_CONFIG
    except ListenError as exc:
        print(f"npudure agent: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0


def _self_test(config: cfg.AgentConfig, backend: Backend) -> selftest.Passed:
    """Every context on its own frame at once, against its solo runs (npudure.agent.selftest)."""
    tested, twin = selftest.target(config, backend)
    try:
        return selftest.run(tested.contexts, tested.input_size)
    finally:
        if twin:
            tested.close()
