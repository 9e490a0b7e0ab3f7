"""``npudure lab up|add|remove|down|status|exec``: the emulated fleet from the command line."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from npudure.argtypes import positive, whole
from npudure_workshop.bench.fmt import text_table
from npudure_workshop.lab import board_cpu, timescale
from npudure_workshop.lab.host import LabError

if TYPE_CHECKING:
    from npudure_workshop.lab.lab import NodeStatus


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="lab_command", metavar="ACTION", required=True)

    def with_state_dir(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument(
            "--state-dir",
            type=Path,
            default=None,
            help="where the lab keeps its boards' layers, logs and key "
            "(default: $NPUDURE_LAB_STATE or /var/lib/npudure/lab)",
        )
        return p

    up = with_state_dir(sub.add_parser("up", help="boot N emulated boards (and a scheduler host)"))
    up.add_argument("--boards", type=whole(1), default=3, help="number of boards (default 3)")
    up.add_argument(
        "--scheduler-host",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also boot a scheduler host 'sched' at 10.231.0.10 (default: yes)",
    )
    up.add_argument(
        "--backend",
        choices=("sim", "onnx"),
        default="sim",
        help="inference backend the inventory asks the agents to use (default sim)",
    )
    up.add_argument(
        "--arm64-boards",
        type=whole(0),
        default=0,
        metavar="N",
        help="boot the last N boards from an arm64 Debian image under qemu-user (needs qemu-user-static; "
        "the image is built once, ~3-5 min). Default 0",
    )
    timescale.add_option(
        up,
        None,
        "picked so the fleet at full load asks for at most half of this host's cores; e.g. 2.5 for 3 "
        "boards on 2 cores",
    )
    up.add_argument(
        "--board-cpu",
        choices=board_cpu.CHOICES,
        default=board_cpu.HOST,
        help="cap each board's CPU at what a real board's big cores are worth, divided by the time scale: "
        "a72 (RK3576), a76 (RK3588), a PROJECTION from docs/board-cpu.md; host = uncapped (default)",
    )
    up.add_argument(
        "--inventory",
        type=Path,
        default=None,
        help="where to write the Ansible inventory (default inventory/lab/hosts.yml in the repo)",
    )
    up.add_argument("--timeout", type=positive, default=90.0, help="seconds to wait for sshd on every board")
    up.add_argument(
        "--keep-on-failure",
        action="store_true",
        help="leave a half-started lab in place for debugging instead of removing it",
    )

    add = with_state_dir(
        sub.add_parser("add", help="boot one more board into the running lab and add it to the inventory")
    )
    add.add_argument("--timeout", type=positive, default=90.0, help="seconds to wait for the board's sshd")
    rm = with_state_dir(sub.add_parser("remove", help="stop one board and take it out of the inventory"))
    rm.add_argument("board", help="the board's name, e.g. board4")
    with_state_dir(sub.add_parser("down", help="stop every board and remove what `up` made"))
    status = with_state_dir(
        sub.add_parser("status", help="table of boards: address, pid, systemd state, ssh (read-only)")
    )
    status.add_argument(
        "--json", action="store_true", help="print one JSON object (for scripts): the same facts as the table"
    )
    ex = with_state_dir(sub.add_parser("exec", help="run a command inside a board: lab exec board1 -- CMD"))
    ex.add_argument("--ssh", action="store_true", help="go over the lab network (default: nsenter)")
    ex.add_argument("--timeout", type=positive, default=300.0)
    ex.add_argument("board")
    ex.add_argument("cmd", nargs=argparse.REMAINDER, help="the command (after --)")


def run(args: argparse.Namespace) -> int:
    from npudure_workshop.lab.lab import Lab

    lab = Lab(args.state_dir)
    try:
        if args.lab_command == "up":
            lab.up(
                boards=args.boards,
                scheduler_host=args.scheduler_host,
                backend=args.backend,
                inventory=args.inventory,
                timeout=args.timeout,
                keep_on_failure=args.keep_on_failure,
                arm64_boards=args.arm64_boards,
                time_scale=args.time_scale,
                board_cpu=args.board_cpu,
            )
            return 0
        if args.lab_command == "add":
            lab.add(timeout=args.timeout)
            return 0
        if args.lab_command == "remove":
            lab.remove(args.board)
            return 0
        if args.lab_command == "down":
            lab.down()
            return 0
        if args.lab_command == "status":
            return _status(lab, as_json=args.json)
        if args.lab_command == "exec":
            cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
            if not cmd:
                print("usage: npudure lab exec BOARD -- CMD [ARG...]", file=sys.stderr)
                return 2
            proc = lab.exec(
                args.board, cmd, via="ssh" if args.ssh else "nsenter", timeout=args.timeout, capture=False
            )
            return proc.returncode
    except LabError as exc:
        print(f"npudure lab {args.lab_command}: {exc}", file=sys.stderr)
        return 1
    return 2


def _status(lab, as_json: bool = False) -> int:
    """The boards' table (or, ``as_json``, one JSON object); exit 0 when every board answers ssh."""
    statuses = lab.status() if lab.nodes else []
    if as_json:
        print(json.dumps(status_document(lab.state_dir, lab.inventory_path, statuses)))
    elif not statuses:
        print(f"no lab in {lab.state_dir} (start one with `npudure lab up`)")
    else:
        print("\n".join(status_table(statuses)))
        if lab.inventory_path:
            print(f"inventory: {lab.inventory_path}")
    return 0 if statuses and all(s.ssh_ok for s in statuses) else 1


def status_table(statuses: list[NodeStatus]) -> list[str]:
    rows = [
        (s.name, s.address, s.role, str(s.nspawn_pid or "-"), s.systemd, "ok" if s.ssh_ok else "no")
        for s in statuses
    ]
    return text_table(("BOARD", "ADDRESS", "ROLE", "NSPAWN PID", "SYSTEMD", "SSH"), rows)


def status_document(state_dir: Path, inventory: Path | None, statuses: list[NodeStatus]) -> dict:
    """``lab status --json``: ``ok`` (a lab is there and every board answers ssh), where its state and
    inventory are, and each board's row of the table (``nspawn_pid`` null when the board is not running)."""
    return {
        "ok": bool(statuses) and all(s.ssh_ok for s in statuses),
        "state_dir": str(state_dir),
        "inventory": str(inventory) if inventory else None,
        "boards": [dataclasses.asdict(s) for s in statuses],
    }
