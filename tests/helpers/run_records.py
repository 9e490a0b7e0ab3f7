"""Hand-built run records shared by the validity tests (test_validity.py, test_expected_reboot.py)."""

from __future__ import annotations

from typing import Any


def figures(boards: list[str], quarters: list[dict[str, Any]]) -> dict[str, Any]:
    """A run's figures: 400 samples, none failed, ``boards`` answered, ``quarters`` as given."""
    return {
        "samples_ok": 400,
        "samples_error": 0,
        "error_rate": 0.0,
        "answered_boards": list(boards),
        "answered_by_quarter": quarters,
    }
