"""Result folders that are never written into twice, and the files inside them.

The reference lost a 15-run dataset when a date-stamped folder was reused and a 4-row run replaced
it. Here every result folder is created with an exclusive ``os.mkdir``: an existing folder is
refused, never reused. Every run keeps its raw samples (``runs/<run_id>/samples.npz``), its telemetry
(``telemetry.csv``) and its metadata (``run.json``), so ``npudure bench recompute`` can rebuild every
figure. Every CSV column carries its unit in its name.

Layout::

    RESULT_DIR/
      manifest.json            command, harness version, target, settings, start/end times
      runs/<run_id>/run.json   what was asked, windows, CPU meters, boot ids, lease, errors
      runs/<run_id>/samples.npz    one row per request (times in s, stage timings in µs)
      runs/<run_id>/telemetry.csv  every board, every second, during the run
      runs.csv  sweep.csv  scaling.csv  scaling_boards.csv  scaling_stages.csv  hetero.csv
      hetero_boards.csv  capacity.csv  capacity_boards.csv  local.csv  local_paths.csv  openloop.csv
      (<kind>-proxyless*.csv in proxyless mode)  telemetry.csv  summary.json  report.md  plots/*.png
"""

from __future__ import annotations

import csv
import json
import math
import os
import secrets
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

DEFAULT_BASE = Path("results")


class ResultDirExists(Exception):
    """The result folder already exists; results are never written into an existing folder."""


def new_result_path(base: Path = DEFAULT_BASE) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return base / f"{stamp}-{secrets.token_hex(3)}"


# The fresh folder named in the refusal when --out is left out (new_result_path's form).
FRESH = "results/<UTC time>-<id>/ folder"


def exists_message(path: Path, what: str = "result folder", fresh: str = FRESH, why: str = "") -> str:
    """The refusal of an existing folder and what to do instead, in the same words for every command."""
    name = f"{what} {path}" if what else str(path)
    return (
        f"{name} already exists: results are never written into an existing folder{why}. "
        f"Pass a new --out, or leave --out out for a fresh {fresh}"
    )


def mkdir_new(path: Path, refused: Callable[[Path], Exception]) -> Path:
    """``path`` created with an exclusive ``os.mkdir``: an existing folder raises ``refused(path)``, so a
    result is never written into it (every command that writes results makes its folder here)."""
    try:
        os.mkdir(path)
    except FileExistsError:
        raise refused(path) from None
    return path


def _mkdir_exclusive(path: Path, what: str) -> None:
    why = " (a reused folder once replaced a 15-run dataset with 4 rows)"
    mkdir_new(path, lambda p: ResultDirExists(exists_message(p, what, why=why)))


class ResultDir:
    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(cls, out: str | Path | None = None, base: Path = DEFAULT_BASE) -> ResultDir:
        """A brand-new folder: ``out`` if given (must not exist), else ``base/<UTC time>-<id>``."""
        path = Path(out) if out else new_result_path(base)
        path.parent.mkdir(parents=True, exist_ok=True)
        _mkdir_exclusive(path, "result folder")
        (path / "runs").mkdir()
        (path / "plots").mkdir()
        return cls(path)

    @classmethod
    def open_existing(cls, path: str | Path) -> ResultDir:
        p = Path(path)
        if not (p / "manifest.json").is_file():
            raise FileNotFoundError(f"{p} is not a bench result folder (no manifest.json)")
        return cls(p)

    def run_dir(self, run_id: str) -> Path:
        path = self.path / "runs" / run_id
        _mkdir_exclusive(path, "run folder")
        return path

    def run_ids(self) -> list[str]:
        """Runs in the order they were executed (run.json's sequence number)."""
        runs = [p for p in (self.path / "runs").iterdir() if (p / "run.json").is_file()]
        return [p.name for p in sorted(runs, key=lambda p: read_json(p / "run.json")["spec"]["sequence"])]

    def write_json(self, name: str, data: Any) -> Path:
        return write_json(self.path / name, data)

    def write_csv(self, name: str, rows: list[dict[str, Any]], columns: list[str] | None = None) -> Path:
        return write_csv(self.path / name, rows, columns)


def json_safe(value: Any) -> Any:
    """JSON-safe: NaN/inf become null (JSON has no NaN), tuples become lists."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def write_json(path: Path, data: Any) -> Path:
    """Indented, JSON-safe (``json_safe``), atomic (a reader never sees half a file); the folder is
    made when missing (a benchmark's ``--out build/x.json``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(json_safe(data), indent=2, sort_keys=False) + "\n")
    os.replace(tmp, path)
    return path


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text())


def _cell(value: Any) -> str:
    if value is None:
        return ""  # absent stays empty, never 0
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "" if not math.isfinite(value) else repr(value)
    if isinstance(value, list | tuple):
        return ";".join(_cell(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(json_safe(value), sort_keys=True)
    return str(value)


def write_csv(path: Path, rows: list[dict[str, Any]], columns: list[str] | None = None) -> Path:
    cols = columns or list(dict.fromkeys(k for r in rows for k in r))
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(cols)
        for row in rows:
            writer.writerow([_cell(row.get(c)) for c in cols])
    return path


def read_csv(path: Path) -> list[dict[str, str]]:
    with Path(path).open(newline="") as f:
        return list(csv.DictReader(f))
