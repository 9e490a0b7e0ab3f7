"""argparse types for the commands' counts and durations.

Each refuses a value out of range while the arguments are parsed, so a typo such as ``--boards 0`` or
``--repetitions 0`` is a usage error (exit 2) that names the option and what it takes, before anything
boots, connects or writes a result folder.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from typing import TypeVar

from npudure.config import MAX_CONTEXTS, MIN_CONTEXTS


def whole(minimum: int) -> Callable[[str], int]:
    """A whole number of at least ``minimum`` (a count of boards, frames, repetitions...)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a whole number (e.g. {max(minimum, 1) + 2})"
            ) from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be {minimum} or more (got {value})")
        return value

    parse.__name__ = f"whole number >= {minimum}"
    return parse


N = TypeVar("N", int, float)


def split_numbers(text: str, convert: Callable[[str], N], what: str, example: str) -> list[N]:
    """``text``'s comma-separated values via ``convert``, blanks skipped (``1,2,4``); a value ``convert``
    refuses is a usage error naming ``what``, e.g. ``example``. Each option bounds the values itself."""
    try:
        return [convert(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected comma-separated {what}, e.g. {example}"
        ) from None


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number (e.g. 2.5)") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number (e.g. 2.5)")
    return value


def positive(text: str) -> float:
    """A number above 0: a time scale, a timeout, a window in seconds."""
    value = _number(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be above 0 (got {text})")
    return value


def non_negative(text: str) -> float:
    """A number of 0 or more: a warm-up that may be skipped, a growth bound."""
    value = _number(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more (got {text})")
    return value


def contexts(text: str) -> int | str:
    """An agent's inference contexts: a whole number from 1 to 64, or auto (AgentConfig.contexts)."""
    if text == "auto":
        return text
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not MIN_CONTEXTS <= value <= MAX_CONTEXTS:
        raise argparse.ArgumentTypeError(
            f"must be a whole number from {MIN_CONTEXTS} to {MAX_CONTEXTS}, or auto (got {text})"
        )
    return value


MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def model_spec(text: str) -> tuple[str | None, str]:
    """``NAME=PATH`` (a named model; the sim ignores PATH, which may be empty) or a bare ``PATH``
    (today's single model): (name or None, path)."""
    name, sep, path = text.partition("=")
    if not sep:
        return None, text
    if not MODEL_NAME.match(name):
        raise argparse.ArgumentTypeError(
            f"{name!r} is not a model name (letters, digits, '.', '_', '-', up to 64; e.g. plates=x.onnx)"
        )
    return name, path
