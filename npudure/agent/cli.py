"""``npudure agent --config /etc/npudure/agent.yml``"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from npudure import config as cfg
from npudure.agent import models, selftest
from npudure.backends import Backend, BackendError, create_backend
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
        # A bad count recorded beside a model, unknown backend, missing model or runtime, too little memory.
        loaded = models.load(config, board_soc, create_backend)
    except BackendError as exc:
        print(f"npudure agent: {exc}", file=sys.stderr)
        return EX_CONFIG
    try:
        passes = _self_tests(config, loaded)
    except (selftest.SelfTestFailed, BackendError) as exc:
        print(f"npudure agent: {exc}", file=sys.stderr)
        _close(loaded)
        return EX_CONFIG
    if args.check:
        print(f"ok: {args.config}: {_checked(loaded, passes, board_soc)}")
        _close(loaded)
        return 0
    from npudure.agent.server import serve

    try:
        asyncio.run(serve(config, loaded, board_soc=board_soc))
    except (BackendError, SecurityError) as exc:
        print(f"npudure agent: {exc}", file=sys.stderr)
        return EX_CONFIG
    except ListenError as exc:
        print(f"npudure agent: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0


def _checked(loaded: list[models.LoadedModel], passes: list[selftest.Passed], board_soc: soc.Soc) -> str:
    """``--check``'s answer: a single model's reads as before model sets; several get a part each."""
    default = loaded[0].backend
    backend = f"backend {default.name}{' (emulated)' if default.emulated else ''}"
    where = f"{board_soc.describe()}, runtime {default.runtime_version}"
    if len(loaded) == 1:
        [model], [passed] = loaded, passes
        return (
            f"{backend}, {len(default.contexts)} context(s) ({model.contexts_source}), {where}, "
            f"model sha256 {default.model_sha256 or '-'}, {passed.describe()}"
        )
    parts = [
        f"model {m.name}: {len(m.backend.contexts)} context(s) ({m.contexts_source}), "
        f"model sha256 {m.backend.model_sha256 or '-'}, {passed.describe()}"
        for m, passed in zip(loaded, passes, strict=True)
    ]
    return f"{backend}, {where}; " + "; ".join(parts)


def _close(loaded: list[models.LoadedModel]) -> None:
    for model in loaded:
        model.backend.close()


def _self_tests(config: cfg.AgentConfig, loaded: list[models.LoadedModel]) -> list[selftest.Passed]:
    """Every model's pool self-tested in turn; a failure names the model when there are several."""
    passes = []
    by_name = {e.name: e for e in models.entries(config)}
    for model in loaded:
        try:
            passed = _self_test(models.model_config(config, by_name[model.name]), model.backend)
        except selftest.SelfTestFailed as exc:
            if len(loaded) == 1:
                raise
            raise selftest.SelfTestFailed(f"model {model.name}: {exc}") from None
        passes.append(passed)
    for model, passed in zip(loaded, passes, strict=True):  # after all passed: a refusal stays one line
        log.info("model %s: %s", model.name, passed.describe())
    return passes


def _self_test(config: cfg.AgentConfig, backend: Backend) -> selftest.Passed:
    """Every context on its own frame at once, against its solo runs (npudure.agent.selftest)."""
    tested, twin = selftest.target(config, backend)
    try:
        return selftest.run(tested.contexts, tested.input_size)
    finally:
        if twin:
            tested.close()
