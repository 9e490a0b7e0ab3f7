"""A sim time scale that keeps the host of an emulated fleet out of its own way.

Every emulated board, the scheduler and the harness share this machine's CPUs. At time scale 1 a board
serves 161.5 frames/s, and each 1.2 MB frame costs the host about ``HOST_CPU_MS_PER_REQUEST`` CPU-ms
between the harness, the scheduler, the agent and the kernel's copies (measured on this project's
2-core VM: 3 full-speed boards saturated it at ~430 frames/s, 2 cores / 430 = 4.7 ms). The scale is
chosen so that the whole fleet at full load asks for at most ``HOST_BUDGET`` of the host's cores.
"""

from __future__ import annotations

import argparse
import math
import os
import sys

from npudure.argtypes import positive

BOARD_INF_S = 161.5  # one emulated board at time scale 1 (docs/sim-model.md)
HOST_CPU_MS_PER_REQUEST = 5.0
HOST_BUDGET = 0.5  # of all cores: room for other work, bursts and the telemetry poller


def pick(boards: int, cores: int) -> tuple[float, str]:
    """(time scale rounded up to 0.5, at least 1; the reason in one line)."""
    demand_cores = boards * BOARD_INF_S * HOST_CPU_MS_PER_REQUEST / 1000
    scale = max(1.0, math.ceil(2 * demand_cores / (HOST_BUDGET * cores)) / 2)
    return scale, (
        f"time scale {scale:g}: {boards} board(s) x {BOARD_INF_S / scale:.1f} frames/s x "
        f"~{HOST_CPU_MS_PER_REQUEST:g} host CPU-ms per frame = {demand_cores / scale:.2f} core(s) of {cores} "
        f"(budget {HOST_BUDGET:.0%} = {HOST_BUDGET * cores:g} core(s)); at time scale 1: {demand_cores:.2f}"
    )


def add_option(parser: argparse.ArgumentParser, default: float | None, default_says: str) -> None:
    """``--time-scale X``, the emulated NPU's service-time multiplier, as every command that deploys
    an emulated fleet takes it; ``default_says`` is the help's "(default: ...)" part."""
    parser.add_argument(
        "--time-scale",
        type=positive,
        default=default,
        metavar="X",
        help=f"emulated NPU service-time multiplier deployed to the boards (default: {default_says})",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m npudure_workshop.lab.timescale", description=__doc__)
    parser.add_argument("--boards", type=int, required=True)
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    if args.boards < 1 or args.cores < 1:
        print("timescale: --boards and --cores must be at least 1", file=sys.stderr)
        return 2
    scale, why = pick(args.boards, args.cores)
    print(why, file=sys.stderr)
    print(f"{scale:g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
