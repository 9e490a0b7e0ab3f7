"""The ``npudure`` command. Each subcommand lives in its own module, imported only when chosen,
so ``npudure affinity plan`` on a board never imports gRPC servers or ONNX Runtime.

A subcommand module provides ``add_arguments(parser)`` and ``run(args) -> int``. The workshop's commands
(bench, lab, local, model, faults) live in the ``npudure_workshop`` package, which boards do not install:
they are named here as strings only (the runtime never imports the workshop; [tool.importlinter]).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable
from typing import Any, NamedTuple

from npudure import __version__
from npudure.extras import CONTROLLER, MissingExtra

# The controller's workshop (workshop/npudure_workshop, distribution npudure-workshop).
WORKSHOP = "npudure_workshop"


class MissingWorkshop(MissingExtra):
    """A workshop command on a machine without the workshop (a board, a runtime-only install)."""

    def __init__(self) -> None:
        super().__init__(
            "part of the controller's workshop (npudure-workshop), which this machine does not have: "
            f"install it on the controller or bench host (pip install 'npudure[{CONTROLLER}]' "
            "--find-links WHEELHOUSE, or scripts/bootstrap.sh in a checkout)"
        )


def import_command(module_name: str) -> Any:
    """A command's module; :class:`MissingWorkshop` when it is the workshop's and the workshop is not
    installed (an import error inside an installed workshop is a bug and stays one)."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if module_name.startswith(WORKSHOP + ".") and exc.name == WORKSHOP:
            raise MissingWorkshop from None
        raise


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """Each option's help ends with its default, unless the help already says it (``default`` in the text:
    most bench options say "default 10; quick 3") or there is none to show (None, False, a flag)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if (
            not action.option_strings
            or any(action.default is nothing for nothing in (None, False, argparse.SUPPRESS))
            or action.default == []
            or "default" in text.lower()
        ):
            return action.help
        return f"{text} (default: %(default)s)"


class CommandHelpFormatter(argparse.RawDescriptionHelpFormatter, DefaultsHelpFormatter):
    """A command's page: its description and example kept as written, defaults shown."""


class Parser(argparse.ArgumentParser):
    """``npudure``'s parsers: defaults shown in every command's and subcommand's help (subparsers are
    made of their parent's class, so this reaches ``npudure bench run`` too)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", DefaultsHelpFormatter)
        super().__init__(*args, **kwargs)


class Command(NamedTuple):
    module: str  # provides add_arguments(parser) and run(args) -> int
    help: str  # one line, in `npudure --help`
    example: str  # shown by `npudure COMMAND --help`


COMMANDS: dict[str, Command] = {
    "agent": Command(
        "npudure.agent.cli",
        "run the board agent (gRPC inference server on one board)",
        "npudure agent --config /etc/npudure/agent.yml --log-level INFO",
    ),
    "scheduler": Command(
        "npudure.scheduler.cli",
        "run the scheduler (gRPC front that routes to the boards)",
        "npudure scheduler --config /etc/npudure/scheduler.yml",
    ),
    "local": Command(
        "npudure_workshop.lab.local",
        "start a scheduler and N agents on loopback (no root, no boards)",
        "npudure local --boards 3 --backend sim --policy least_inflight",
    ),
    "status": Command(
        "npudure.client.status",
        "show a scheduler's cluster status or an agent's node status",
        "npudure status --target 127.0.0.1:50050 --json",
    ),
    "infer": Command(
        "npudure.client.infer",
        "send frames to a scheduler or agent and print the detections",
        "npudure infer --target 127.0.0.1:50050 --image street.jpg --count 6",
    ),
    "check-answers": Command(
        "npudure.client.check_answers",
        "send the same frames to every board and name the boards whose detections differ",
        "npudure check-answers 10.0.0.11:50051 10.0.0.12:50051 10.0.0.13:50051",
    ),
    "admin": Command(
        "npudure.client.admin",
        "drain, undrain and wait for boards (a rolling change's steps)",
        "npudure admin drain --target 127.0.0.1:50050 --node board1",
    ),
    "bench": Command(
        "npudure_workshop.bench.cli",
        "measure a running cluster: saturation, scaling, heterogeneity",
        "npudure bench run --target 127.0.0.1:50050 --quick",
    ),
    "affinity": Command(
        "npudure.affinity.cli",
        "plan or apply big.LITTLE CPU and NPU IRQ affinity",
        "npudure affinity plan --json",
    ),
    "model": Command(
        "npudure_workshop.model.cli",
        "build the YOLOv8n ONNX model (no download) and inspect models",
        "npudure model build",
    ),
    "lab": Command(
        "npudure_workshop.lab.cli",
        "the emulated fleet: boards as systemd-nspawn containers (root)",
        "sudo npudure lab up --boards 3",
    ),
    "pki": Command(
        "npudure.security.cli",
        "a small CA for mutual TLS: init-ca, csr, sign, check",
        "npudure pki init-ca --dir ~/.config/npudure/ca",
    ),
    "faults": Command(
        "npudure_workshop.faults.cli",
        "fault suite and soak on the emulated fleet (root)",
        "sudo npudure faults run",
    ),
}


def _parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="npudure",
        description="Turn a shelf of Rockchip NPU boards into one inference cluster.",
    )
    parser.add_argument("--version", action="version", version=f"npudure {__version__}")
    return parser


def build_parser(load: Callable[[str], bool]) -> argparse.ArgumentParser:
    """The ``npudure`` parser; a command's own arguments are added only where ``load(name)`` (its module is
    imported then), so a run imports one command's module and the help test can load them all."""
    parser = _parser()
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text, example) in COMMANDS.items():
        cmd = sub.add_parser(
            name,
            help=help_text,
            description=help_text,
            epilog=f"example: {example}",
            formatter_class=CommandHelpFormatter,
        )
        if load(name):
            module = import_command(module_name)
            module.add_arguments(cmd)
            cmd.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    chosen = next((a for a in argv if not a.startswith("-")), None)
    try:
        parser = build_parser(lambda name: name == chosen)
    except MissingWorkshop as exc:
        print(f"npudure {chosen}: {exc}", file=sys.stderr)
        return 1
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    try:
        return int(args._run(args) or 0)
    except KeyboardInterrupt:
        return 130
    except MissingExtra as exc:  # a controller command on a machine installed without its extra
        print(f"npudure {args.command}: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # `npudure status | head`: the reader has what it wanted. Silence the final flush, exit quietly.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
