"""What an operator set at run time and a scheduler restart must not forget: drained boards, the
active set, the policy, the benchmark lease. One JSON file, replaced atomically (write a temporary
file beside it, fsync, rename), so a crash mid-write leaves the old state or the new one, never half.

The board set itself is the config file's; saved names that are no longer in it are ignored. The
policy is kept only while the config's policy is the one it was set against: an operator who then
edits ``policy:`` in the config means the new one.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

VERSION = 1
FILE_NAME = "state.json"


@dataclass(frozen=True)
class SavedState:
    policy: str
    # The config's policy when ``policy`` was saved.
    config_policy: str
    drained: list[str] = field(default_factory=list)
    # Boards out of the active set (so that a board added later starts active).
    inactive: list[str] = field(default_factory=list)
    # The benchmark lease: its holder and when it lapses (wall clock: it must survive the process).
    lease_holder: str = ""
    lease_until_unix: float = 0.0

    def policy_for(self, config_policy: str) -> str:
        return self.policy if self.config_policy == config_policy else config_policy

    def inactive_among(self, names: Iterable[str]) -> set[str]:
        """Saved inactive boards still configured; none when that would leave no board active."""
        names = set(names)
        inactive = set(self.inactive) & names
        return inactive if inactive != names else set()


def state_path(configured: str | None, environ: dict[str, str] | None = None) -> Path | None:
    """``state_file`` from the config ($VARS expanded), else systemd's $STATE_DIRECTORY/state.json."""
    env = os.environ if environ is None else environ
    if configured:
        return Path(os.path.expandvars(configured))
    directory = env.get("STATE_DIRECTORY", "").split(":")[0]
    return Path(directory) / FILE_NAME if directory else None


def load(path: Path) -> SavedState | None:
    """The saved state, or None when there is none or it cannot be used (said once in the log)."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("ignoring the saved state %s (starting from the config): %s", path, exc)
        return None
    try:
        if data.get("version") != VERSION:
            raise ValueError(f"version {data.get('version')!r}, expected {VERSION}")
        state = SavedState(
            policy=str(data["policy"]),
            config_policy=str(data["config_policy"]),
            drained=[str(n) for n in data.get("drained", [])],
            inactive=[str(n) for n in data.get("inactive", [])],
            lease_holder=str(data.get("lease_holder", "")),
            lease_until_unix=float(data.get("lease_until_unix", 0.0)),
        )
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        log.warning("ignoring the saved state %s (starting from the config): %s", path, exc)
        return None
    return state


def save(path: Path, state: SavedState) -> None:
    """Replace ``path`` with ``state`` atomically; the folder must exist (StateDirectory= makes it)."""
    text = json.dumps({"version": VERSION, **asdict(state)}, indent=1, sort_keys=True) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # the rename itself survives a power cut
    finally:
        os.close(dir_fd)
