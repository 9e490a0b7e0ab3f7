"""What each emulated machine costs the host: memory (its cgroup's resident set) and CPU (its cgroup's
CPU time over an interval). ``python -m npudure_workshop.lab.footprint [--seconds 10]`` on a running lab."""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from npudure_workshop.lab.board import CGROUP_ROOT, LAB_CGROUP


@dataclass(frozen=True)
class Footprint:
    name: str
    rss_mib: float | None  # anonymous + file-mapped resident memory (page cache excluded)
    cpu_fraction: float | None  # of one CPU, over the interval


def _stat(path: Path) -> dict[str, int]:
    try:
        return {k: int(v) for k, v in (line.split() for line in path.read_text().splitlines())}
    except (OSError, ValueError):
        return {}


def _rss_bytes(name: str, root: Path) -> int | None:
    v1 = _stat(root / "memory" / LAB_CGROUP / name / "memory.stat")
    if v1:
        return v1.get("total_rss", 0) + v1.get("total_mapped_file", 0)
    v2 = _stat(root / LAB_CGROUP / name / "memory.stat")
    return v2.get("anon", 0) + v2.get("file_mapped", 0) if v2 else None


def _cpu_s(name: str, root: Path) -> float | None:
    try:
        return int((root / "cpuacct" / LAB_CGROUP / name / "cpuacct.usage").read_text()) / 1e9
    except (OSError, ValueError):
        usec = _stat(root / LAB_CGROUP / name / "cpu.stat").get("usage_usec")
        return usec / 1e6 if usec is not None else None


def measure(names: list[str], seconds: float, root: Path = CGROUP_ROOT) -> list[Footprint]:
    before = {n: _cpu_s(n, root) for n in names}
    t0 = time.monotonic()
    time.sleep(seconds)
    wall = time.monotonic() - t0
    out = []
    for n in names:
        start, end = before[n], _cpu_s(n, root)
        rss = _rss_bytes(n, root)
        cpu = (end - start) / wall if start is not None and end is not None else None
        out.append(Footprint(n, rss / 2**20 if rss is not None else None, cpu))
    return out


def main(argv: list[str] | None = None) -> int:
    from npudure_workshop.lab.lab import Lab

    parser = argparse.ArgumentParser(prog="python -m npudure_workshop.lab.footprint", description=__doc__)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args(argv)
    names = [n.name for n in Lab().nodes]
    if not names:
        print("footprint: no lab is up (start one with `npudure lab up`)", file=sys.stderr)
        return 1
    rows = measure(names, args.seconds)
    for r in rows:
        rss = f"{r.rss_mib:7.1f} MiB" if r.rss_mib is not None else "      ? MiB"
        cpu = f"{r.cpu_fraction:6.1%} of a CPU" if r.cpu_fraction is not None else "? CPU"
        print(f"{r.name:8s} {rss}  {cpu}")
    boards = [r for r in rows if r.name.startswith("board")]
    rss_mib = [r.rss_mib for r in boards if r.rss_mib is not None]
    cpu_fraction = [r.cpu_fraction for r in boards if r.cpu_fraction is not None]
    if rss_mib and cpu_fraction:
        print(
            f"per board (mean of {len(boards)}): {sum(rss_mib) / len(rss_mib):.1f} MiB, "
            f"{sum(cpu_fraction) / len(cpu_fraction):.1%} of a CPU over {args.seconds:g} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
