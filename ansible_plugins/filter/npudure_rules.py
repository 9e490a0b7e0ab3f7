"""The alert rules file with the ``for:`` durations an inventory sets (npudure_monitoring_alert_for).

The text is edited line by line, not parsed and dumped, so that the installed file keeps its comments
and layout and, with the role's defaults, is byte for byte the repository's monitoring/rules file (the
one ``promtool test rules`` pins). An alert is named by its ``alert:``, or ``<alert>/<reason label>``
when several rules share the name (NpudureBoardNotServing).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

_ALERT = re.compile(r"^\s*- alert:\s*(\S+)\s*$")
_REASON = re.compile(r"^\s*reason:\s*(\S+)\s*$")
_FOR = re.compile(r"^(\s*)for:\s*(\S+)\s*$")
_DURATION = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")


def _rules(lines: list[str]) -> list[tuple[str, int | None, str | None]]:
    """(name, index of its ``for:`` line or None, reason label or None) of every alert rule."""
    starts = [i for i, line in enumerate(lines) if _ALERT.match(line)]
    found = []
    for n, start in enumerate(starts):
        end = starts[n + 1] if n + 1 < len(starts) else len(lines)
        name = _ALERT.match(lines[start]).group(1)  # type: ignore[union-attr]
        for_at = next((i for i in range(start, end) if _FOR.match(lines[i])), None)
        reason = next((m.group(1) for i in range(start, end) if (m := _REASON.match(lines[i]))), None)
        found.append((name, for_at, reason))
    return found


def alert_for(text: str, durations: Mapping[str, Any] | None) -> str:
    """``text`` (an alert rules file) with the ``for:`` of each alert named in ``durations`` replaced."""
    if not durations:
        return text
    lines = text.split("\n")
    rules = _rules(lines)
    if not rules:  # a file of recording rules only
        return text
    names = [name for name, _, _ in rules]
    keyed: dict[str, int | None] = {}
    for name, for_at, reason in rules:
        keyed[f"{name}/{reason}" if names.count(name) > 1 and reason else name] = for_at
    unknown = sorted(set(durations) - set(keyed))
    if unknown:
        raise AnsibleFilterError(
            f"npudure_monitoring_alert_for names no alert of the rules file: {', '.join(unknown)} "
            f"(known: {', '.join(sorted(keyed))})"
        )
    for key, value in durations.items():
        duration = str(value).strip()
        if not _DURATION.match(duration):
            raise AnsibleFilterError(
                f"npudure_monitoring_alert_for[{key!r}] = {value!r} is not a Prometheus duration "
                "(e.g. 30s, 5m)"
            )
        at = keyed[key]
        if at is None:
            raise AnsibleFilterError(
                f"npudure_monitoring_alert_for[{key!r}]: that alert has no for: (it fires at once)"
            )
        indent = _FOR.match(lines[at]).group(1)  # type: ignore[union-attr]
        lines[at] = f"{indent}for: {duration}"
    return "\n".join(lines)


class FilterModule:
    """npudure rules filters."""

    def filters(self) -> dict[str, Any]:
        return {"npudure_alert_for": alert_for}
