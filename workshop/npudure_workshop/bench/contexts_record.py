"""The model's record beside it (``<model>.json``, as ``npudure model convert`` writes it): ``bench
contexts --record MODEL`` puts the measured operating point under ``contexts``, which an agent with
``contexts: auto`` takes for that model (npudure.backends.contexts.recorded). Every other key of the
record is kept."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from npudure.backends.contexts import record_path  # where the agent looks: one definition


class RecordError(Exception):
    """The record cannot be read or written: the message says which file and why."""


def read_record(model: str | Path) -> dict[str, Any]:
    """The record's keys ({} when there is none yet)."""
    path = record_path(str(model))
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise RecordError(f"{path}: cannot read it as JSON ({exc}): fix or remove it first") from None
    if not isinstance(data, dict):
        raise RecordError(f"{path}: not a JSON object: fix or remove it first")
    return data


def check_recordable(model: str | Path) -> None:
    """Before measuring: the model exists and its record can be read and written."""
    if not Path(model).is_file():
        raise RecordError(f"--record {model}: no such model file")
    read_record(model)
    folder = record_path(str(model)).parent
    if not os.access(folder, os.W_OK):
        raise RecordError(f"--record {model}: {folder} is not writable by this user")


def write_contexts(model: str | Path, contexts: int, measured: dict[str, Any]) -> Path:
    """``contexts`` (and where it came from, under ``contexts_measured``) into the record, atomically."""
    path = record_path(str(model))
    record = {**read_record(model), "contexts": contexts, "contexts_measured": measured}
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    os.replace(tmp, path)
    return path
