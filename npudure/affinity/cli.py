"""``npudure affinity plan|apply``: show or apply the big.LITTLE split and the NPU IRQ steering.

``plan --json`` is what the Ansible role reads to render the agent's ``CPUAffinity=`` drop-in;
``apply`` is what the boot-time oneshot runs. Exit codes: 0 = fine (including nothing to do),
1 = an IRQ could not be steered, 3 = ``--wait-npu`` saw no NPU interrupt line appear.
"""

from __future__ import annotations

import argparse
import json
import sys

from npudure.affinity import cores
from npudure.affinity.irq import IrqChange, Plan, apply_plan, make_plan, wait_for_npu_irqs

EXIT_NO_NPU = 3


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--sysfs-root", default="/sys", help="where sysfs is mounted (default: /sys)")
    common.add_argument("--proc-root", default="/proc", help="where procfs is mounted (default: /proc)")
    common.add_argument(
        "--include-gpu",
        action="store_true",
        help="steer the GPU IRQs (galcore, mali) to the little cores too",
    )
    common.add_argument(
        "--min-gap",
        type=float,
        default=cores.DEFAULT_MIN_GAP,
        help="smallest capacity ratio that counts as big vs little (default: %(default)s)",
    )
    common.add_argument("--json", action="store_true", help="print a machine-readable JSON object")
    sub = parser.add_subparsers(dest="affinity_command", metavar="ACTION", required=True)
    sub.add_parser(
        "plan",
        parents=[common],
        help="show what would be pinned and steered (changes nothing)",
        description="Show the big/little split, the agent's CPUAffinity= and each NPU IRQ's mask.",
    )
    apply = sub.add_parser(
        "apply",
        parents=[common],
        help="steer the NPU IRQs to the little cores (root)",
        description="Write the little-core mask to /proc/irq/N/smp_affinity for each NPU IRQ (idempotent).",
    )
    apply.add_argument("--dry-run", action="store_true", help="report what would change, write nothing")
    apply.add_argument(
        "--wait-npu",
        type=float,
        default=None,
        metavar="SECONDS",
        help="wait up to SECONDS for an NPU interrupt line to appear and fail (exit 3) if none does; "
        "without it a board with no NPU line is steered as far as it can be",
    )


def run(args: argparse.Namespace) -> int:
    wait = getattr(args, "wait_npu", None)
    if wait is not None:
        if wait < 0:
            print("npudure affinity apply: --wait-npu must be 0 or more seconds", file=sys.stderr)
            return 2
        if not wait_for_npu_irqs(args.proc_root, wait):
            print(
                f"npudure affinity apply: no NPU interrupt (a line naming <address>.npu) in "
                f"{args.proc_root}/interrupts after {wait:g} s: the rknpu driver has not probed. Check "
                "`dmesg | grep -i rknpu`, that the kernel has the rknpu driver and its device tree enables "
                "the NPU; raise npudure_irq_affinity_npu_wait_s if it probes late",
                file=sys.stderr,
            )
            return EXIT_NO_NPU
    plan = make_plan(args.sysfs_root, args.proc_root, include_gpu=args.include_gpu, min_gap=args.min_gap)
    if args.affinity_command == "plan":
        print(json.dumps(plan.to_dict(), indent=2, sort_keys=True) if args.json else render_plan(plan))
        return 0
    changes = apply_plan(plan, args.proc_root, dry_run=args.dry_run)
    failed = any(change.status == "failed" for change in changes)
    if args.json:
        body = {
            "uniform": plan.uniform,
            "dry_run": args.dry_run,
            "ok": not failed,
            "changed": any(change.status == "changed" for change in changes),
            "changes": [change.to_dict() for change in changes],
            "notes": list(plan.notes),
        }
        print(json.dumps(body, indent=2, sort_keys=True))
    else:
        print(render_changes(plan, changes, args.dry_run))
    return 1 if failed else 0


def render_plan(plan: Plan) -> str:
    split = plan.split
    out = [f"cores: {split.reason}"]
    if split.capacities:
        big, little = set(split.big), set(split.little)
        out.append("  cpu  capacity  role")
        for cpu, cap in split.capacities:
            role = "big" if cpu in big else "little" if cpu in little else "-"
            out.append(f"  {cpu:>3}  {cap:>8}  {role}")
    if not plan.uniform:
        line = f"CPUAffinity={plan.cpu_affinity}" if plan.cpu_affinity else "(no CPUAffinity= line)"
        out.append(f"agent unit: {line}")
        out.append(
            f"NPU submit threads -> big cpus {plan.agent_cpus}; I/O threads -> little cpus {plan.io_cpus}"
        )
    if plan.irqs:
        out.append(f"IRQs -> little cpus {plan.io_cpus} (mask {plan.irqs[0].target_mask}):")
        out.append(f"  {'irq':>5}  {'device':<28}  {'current':<16}  target")
        for a in plan.irqs:
            current = f"{a.current_mask} ({a.current_cpus})" if a.current_mask is not None else "unreadable"
            todo = "change" if a.needs_change else "already there"
            out.append(
                f"  {a.irq:>5}  {a.device:<28}  {current:<16}  {a.target_mask} ({a.target_cpus})  {todo}"
            )
    out.extend(f"note: {note}" for note in plan.notes)
    return "\n".join(out)


def render_changes(plan: Plan, changes: list[IrqChange], dry_run: bool) -> str:
    if not changes:
        reason = "; ".join(plan.notes) or "no IRQs to steer"
        return f"nothing to do: {reason}"
    out = ["dry run: nothing written"] if dry_run else []
    for c in changes:
        line = f"IRQ {c.irq} ({c.device}): {c.before} -> {c.after}  {c.status}"
        out.append(f"{line}: {c.error}" if c.error else line)
    out.extend(f"note: {note}" for note in plan.notes)
    return "\n".join(out)
