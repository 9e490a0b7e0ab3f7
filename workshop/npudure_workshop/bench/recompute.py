"""``npudure bench recompute DIR``: rebuild every figure from the raw samples and compare with summary.json.

A figure that cannot be recomputed from what was kept is a figure nobody can check. This rebuilds the
summary with the same code that wrote it, from runs/*/samples.npz, run.json and telemetry.csv only,
and lists every value that differs (an edited summary, a lost or changed raw file, a changed formula).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from npudure_workshop.bench import analysis
from npudure_workshop.bench.results import ResultDir, read_json

# Summary fields added after the first result folders were written; a folder without them still checks.
ADDED_KEYS = frozenset({"via", "noted"})
REL_TOL = 1e-9
ABS_TOL = 1e-9


def _json_roundtrip(value: Any) -> Any:
    from npudure_workshop.bench.results import json_safe

    return json.loads(json.dumps(json_safe(value)))


def differences(stored: Any, fresh: Any, path: str = "") -> list[str]:
    """Every place where two JSON-like trees differ (floats compared with a tight tolerance)."""
    if isinstance(stored, dict) and isinstance(fresh, dict):
        out = []
        for key in sorted(set(stored) | set(fresh)):
            where = f"{path}.{key}" if path else str(key)
            if key not in stored and key in ADDED_KEYS:
                continue  # a field newer than the folder: nothing stored to compare with
            if key not in stored:
                out.append(f"{where}: missing from summary.json (recomputed {fresh[key]!r:.80})")
            elif key not in fresh:
                out.append(f"{where}: in summary.json but not recomputed")
            else:
                out += differences(stored[key], fresh[key], where)
        return out
    if isinstance(stored, list) and isinstance(fresh, list):
        if len(stored) != len(fresh):
            return [f"{path}: {len(stored)} items stored, {len(fresh)} recomputed"]
        return [
            d
            for i, (a, b) in enumerate(zip(stored, fresh, strict=True))
            for d in differences(a, b, f"{path}[{i}]")
        ]
    numeric = (int, float)
    if isinstance(stored, numeric) and isinstance(fresh, numeric) and not isinstance(stored, bool):
        if math.isclose(float(stored), float(fresh), rel_tol=REL_TOL, abs_tol=ABS_TOL):
            return []
        return [f"{path}: stored {stored!r}, recomputed {fresh!r}"]
    return [] if stored == fresh else [f"{path}: stored {stored!r:.80}, recomputed {fresh!r:.80}"]


def recompute(folder: str | Path) -> tuple[dict[str, Any], list[str]]:
    """(the recomputed summary, differences against the stored summary.json)."""
    result = ResultDir.open_existing(folder)
    stored_path = result.path / "summary.json"
    if not stored_path.is_file():
        raise FileNotFoundError(
            f"{result.path} has no summary.json (the benchmark did not finish writing it)"
        )
    fresh, _, _ = analysis.build_summary(result)
    return fresh, differences(read_json(stored_path), _json_roundtrip(fresh))
