"""Process-level settings shared by the agent and the scheduler."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from npudure import config as cfg
from npudure.service import handover

# glibc returns each 1.2 MB frame buffer to the kernel after use and faults it in again on the next
# request (~3 us per page on a VM): measured here, this halves the CPU cost of receiving a frame.
# Exit status for a configuration error (sysexits EX_CONFIG): units set RestartPreventExitStatus=78, so a
# bad config stops the service instead of restarting it every few seconds.
EX_CONFIG = 78
# gRPC's default SO_REUSEPORT lets a second server bind the same port and silently take half the traffic.
SERVER_OPTIONS = [("grpc.so_reuseport", 0)]

MALLOC_TUNING = {"MALLOC_MMAP_THRESHOLD_": "67108864", "MALLOC_TRIM_THRESHOLD_": "1073741824"}
# The scheduler also caps glibc's malloc arenas: gRPC's threads each filled an arena of their own with
# freed 1.2 MB frames (6 thread arenas of 7-10 MiB after 16 min on loopback) while the Python objects
# stayed flat under tracemalloc. Two arenas: ~85 instead of ~105 MiB after 5 min; whether the slow
# climb stops needs a soak longer than the 8-9 min ones run so far (benchmarks/scheduler_memory.py).
SCHEDULER_MALLOC_TUNING = {**MALLOC_TUNING, "MALLOC_ARENA_MAX": "2"}


def ensure_malloc_tuning(tuning: dict[str, str] = MALLOC_TUNING) -> None:
    """Re-exec the current command once with the malloc settings (glibc reads them only at start)."""
    if all(os.environ.get(k) for k in tuning) or os.environ.get("NPUDURE_NO_REEXEC"):
        return
    env = {**os.environ, **tuning}
    os.execve(sys.executable, [sys.executable, "-m", "npudure", *sys.argv[1:]], env)


# The --log-level choices: logging's level names, most verbose first (getLevelNamesMapping is 3.11+,
# and the agent runs on the boards' Python 3.10 too).
LOG_LEVELS = tuple(
    logging.getLevelName(level)
    for level in (logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR, logging.CRITICAL)
)


def add_service_arguments(parser: argparse.ArgumentParser, command: str, check_help: str) -> None:
    """The agent's and the scheduler's command line: --config, --check, --log-level."""
    parser.add_argument(
        "--config", required=True, help=f"{command} YAML config (e.g. /etc/npudure/{command}.yml)"
    )
    parser.add_argument("--check", action="store_true", help=check_help)
    parser.add_argument(
        "--log-level", default="INFO", type=str.upper, choices=LOG_LEVELS, help="log verbosity (default INFO)"
    )


def load_service_config(model: type[cfg.Model], path: str | Path, command: str) -> cfg.Model | None:
    """``path`` loaded as ``model``, or None after saying why on stderr as ``npudure <command>: ...``."""
    try:
        return cfg.load(model, path)
    except cfg.ConfigError as exc:
        print(f"npudure {command}: {exc}", file=sys.stderr)
        handover.report_failure(" ".join(str(exc).split()))  # one line, to a predecessor if any
        return None


# syslog priorities (sd-daemon.h): debug 7, info 6, warning 4, err 3, crit 2.
JOURNAL_PRIORITY = {
    logging.DEBUG: 7,
    logging.INFO: 6,
    logging.WARNING: 4,
    logging.ERROR: 3,
    logging.CRITICAL: 2,
}


class JournalFormatter(logging.Formatter):
    """Prefix each line with its syslog priority (``<4>`` = warning) so journald files it at that level:
    ``journalctl -p warning`` then shows the warnings. The journal adds its own time stamp."""

    def format(self, record: logging.LogRecord) -> str:
        priority = JOURNAL_PRIORITY.get(record.levelno, 6)
        return "\n".join(f"<{priority}>{line}" for line in super().format(record).splitlines())


def setup_logging(level: str = "INFO") -> None:
    handler = logging.StreamHandler()
    if os.environ.get("JOURNAL_STREAM"):  # stderr is connected to journald
        handler.setFormatter(JournalFormatter("%(levelname)s %(name)s: %(message)s"))
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), handlers=[handler])
