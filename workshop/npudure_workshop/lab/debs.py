"""Prometheus for the lab's monitoring host, fetched on the controller: the containers cannot reach a
package mirror, the controller can. ``apt-get download`` puts into a cache folder the packages (and only
those of their dependencies) that a host with the lab image's package set lacks; the npudure_monitoring
role installs them from there (``npudure_monitoring_deb_dir``).

The same two commands serve a real offline fleet, run on a controller of the boards' release:
    apt-get -s -o Dir::State::status=<a board's dpkg/status file> install --no-install-recommends prometheus
    cd <folder> && apt-get download <every package the first command lists as Inst>
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

PACKAGES = ("prometheus",)
DEFAULT_DIR = Path("/var/cache/npudure/monitoring-debs-bookworm")
MARKER = ".npudure-debs.json"
TIMEOUT_S = 300
_INST = re.compile(r"^Inst (\S+) ")


class DebsError(Exception):
    """The packages could not be fetched; the message says why."""


def missing(packages: tuple[str, ...], status_file: Path) -> list[str]:
    """The packages apt would install on a host whose dpkg status is ``status_file`` (no recommends)."""
    done = _apt(
        [
            "apt-get",
            "-s",
            "-o",
            f"Dir::State::status={status_file}",
            "install",
            "--no-install-recommends",
            *packages,
        ]
    )
    return [m.group(1) for line in done.stdout.splitlines() if (m := _INST.match(line))]


def ensure(status_file: Path, dest: Path = DEFAULT_DIR, packages: tuple[str, ...] = PACKAGES) -> Path:
    """``dest`` holding the .deb files of ``packages`` and what a host of ``status_file`` lacks for them
    (reused when an earlier fetch for the same package list is complete)."""
    marker = dest / MARKER
    names = missing(packages, status_file)
    if not names:
        raise DebsError(
            f"apt reports nothing to install for {', '.join(packages)}: is the status file right?"
        )
    try:
        if json.loads(marker.read_text()).get("packages") == names and _complete(dest, names):
            return dest
    except (OSError, ValueError):
        pass
    dest.mkdir(parents=True, exist_ok=True)
    for old in dest.glob("*.deb"):
        old.unlink()
    _apt(["apt-get", "download", *names], cwd=dest)
    if not _complete(dest, names):
        raise DebsError(f"apt-get download left {dest} without every package of: {' '.join(names)}")
    marker.write_text(json.dumps({"packages": names}))
    return dest


def _complete(dest: Path, names: list[str]) -> bool:
    have = {p.name.split("_", 1)[0] for p in dest.glob("*.deb")}
    return set(names) <= have


def _apt(argv: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    try:
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DebsError(f"{argv[0]} {argv[1]} failed: {exc}") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise DebsError(f"`{' '.join(argv[:3])} ...` exited {done.returncode}: {last}")
    return done
