"""The ``npudure`` command. Each subcommand lives in its own module, imported only when chosen,
so ``npudure affinity plan`` on a board never imports gRPC servers or ONNX Runtime.

A subcommand module provides ``add_arguments(parser)`` and ``run(args) -> int``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from npudure import __version__
from npudure.extras import MissingExtra

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "agent": ("npudure.agent.cli", "run the board agent (gRPC inference server on one board)"),
    "scheduler": ("npudure.scheduler.cli", "run the scheduler (gRPC front that routes to the boards)"),
    "local": ("npudure.lab.local", "start a scheduler and N agents on loopback (no root, no boards)"),
    "status": ("npudure.client.status", "show a scheduler's cluster status or an agent's node status"),
    "infer": ("npudure.client.infer", "send frames to a scheduler or agent and print the detections"),
    "admin": ("npudure.client.admin", "drain, undrain and wait for boards (a rolling change's steps)"),
    "bench": ("npudure.bench.cli", "measure a running cluster: saturation, scaling, heterogeneity"),
    "affinity": ("npudure.affinity.cli", "plan or apply big.LITTLE CPU and NPU IRQ affinity"),
    "model": ("npudure.model.cli", "build the YOLOv8n ONNX model (no download) and inspect models"),
    "lab": ("npudure.lab.cli", "the emulated fleet: boards as systemd-nspawn containers (root)"),
    "pki": ("npudure.security.cli", "a small CA for mutual TLS: init-ca, csr, sign, check"),
    "faults": ("npudure.faults.cli", "fault suite and soak on the emulated fleet (root)"),
}


# One example per command, shown by `npudure COMMAND --help`.
EXAMPLES: dict[str, str] = {
    "agent": "npudure agent --config /etc/npudure/agent.yml --log-level INFO",
    "scheduler": "npudure scheduler --config /etc/npudure/scheduler.yml",
    "local": "npudure local --boards 3 --backend sim --policy least_inflight",
    "status": "npudure status --target 127.0.0.1:50050 --json",
    "infer": "npudure infer --target 127.0.0.1:50050 --image street.jpg --count 6",
    "admin": "npudure admin drain --target 127.0.0.1:50050 --node board1",
    "bench": "npudure bench run --target 127.0.0.1:50050 --quick",
    "affinity": "npudure affinity plan --json",
    "model": "npudure model build",
    "lab": "sudo npudure lab up --boards 3",
    "pki": "npudure pki init-ca --dir ~/.config/npudure/ca",
    "faults": "sudo npudure faults run",
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="npudure",
        description="Turn a shelf of Rockchip NPU boards into one inference cluster.",
    )
    parser.add_argument("--version", action="version", version=f"npudure {__version__}")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    chosen = next((a for a in argv if not a.startswith("-")), None)
    for name, (module_name, help_text) in COMMANDS.items():
        cmd = sub.add_parser(
            name,
            help=help_text,
            description=help_text,
            epilog=f"example: {EXAMPLES[name]}",
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        if name == chosen:
            module = importlib.import_module(module_name)
            module.add_arguments(cmd)
            cmd.set_defaults(_run=module.run)
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
