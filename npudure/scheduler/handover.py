"""``npudure scheduler --config FILE --handover``: replace the running scheduler without a gap.

Checks FILE here first (a bad file never reaches the scheduler), then signals the process named by the
pid file beside the state file and waits until its successor serves (``npudure.service.handover``).
One line either way. Exit 0: the new process serves; 1: the handover failed and the old process keeps
serving; 3: no scheduler to hand over from (start it instead); 78: the config is bad.
"""

from __future__ import annotations

import sys

from npudure import config as cfg
from npudure.scheduler.state import state_path
from npudure.service import handover
from npudure.service.runtime import EX_CONFIG

PREFIX = "npudure scheduler: handover"
EX_NOT_RUNNING = 3


def run(config_path: str, timeout_s: float | None = None) -> int:
    try:
        config = cfg.load(cfg.SchedulerConfig, config_path)
    except cfg.ConfigError as exc:
        print(f"{PREFIX} refused, the running scheduler keeps serving: {exc}", file=sys.stderr)
        return EX_CONFIG
    state = state_path(config.state_file)
    if state is None:
        print(
            f"{PREFIX}: no pid file to find the running scheduler by: set state_file in {config_path} "
            "or run with STATE_DIRECTORY set (the unit's StateDirectory, /var/lib/npudure-scheduler)",
            file=sys.stderr,
        )
        return EX_NOT_RUNNING
    pid_file = state.parent / handover.PID_NAME
    # The successor's own limit (startup_wait_s + 60, see scheduler.server) and a margin for the signal.
    wait_s = timeout_s if timeout_s is not None else config.startup_wait_s + 70.0
    try:
        old, new = handover.request(pid_file, wait_s)
    except handover.NothingToHandOver:
        print(
            f"{PREFIX}: no scheduler serves ({pid_file} names none: not running, still starting, or a "
            "version without handover): start or restart it",
            file=sys.stderr,
        )
        return EX_NOT_RUNNING
    except handover.HandoverError as exc:
        print(f"{PREFIX} failed: {exc}", file=sys.stderr)
        return 1
    print(f"{PREFIX}: pid {new} serves {config.listen}; pid {old} finishes its requests and exits")
    return 0
