"""Number and table formatting shared by the report, the terminal summary and the experiments."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

NA = "–"


def f(value: Any, fmt: str = ".1f", suffix: str = "") -> str:
    if value is None:
        return NA
    try:
        return f"{value:{fmt}}{suffix}"
    except (TypeError, ValueError):
        return str(value)


def pct(value: float | None) -> str:
    return NA if value is None else f"{value * 100:.1f}%"


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def valid_runs(g: dict[str, Any]) -> str:
    return f"{g['conditions']['repetitions_valid']}/{g['conditions']['repetitions_total']}"


VIA_TEXT = {
    "scheduler": "through the scheduler, policy {policy}",
    "proxyless": "proxyless: the client balances over the scheduler's route (not the scheduler's policy)",
    "agent": "straight to the agent, no scheduler",
}


def via_text(via: str, policy: str) -> str:
    """How the load reached the boards, for every table's conditions."""
    return VIA_TEXT.get(via, f"via {via}").format(policy=policy)


def conditions_line(c: dict[str, Any]) -> str:
    load = (
        f"concurrency {c['concurrency_total']} ({c['per_board_concurrency']}/board)"
        if c.get("concurrency_total") is not None
        else f"rate {f(c.get('rate_target_inf_per_s'), 'g')} inf/s"
    )
    via = via_text(c.get("via", "scheduler"), c["policy"])
    return (
        f"{c['backend']}; boards {', '.join(c['boards'])}; {via}; "
        f"{c['connections_per_board']} connection(s)/board (harness {c['harness_connections']}); {load}; "
        f"payload {f(c['payload_bytes_mean'], ',.0f')} B {c['encoding']}; "
        f"{c['repetitions_valid']}/{c['repetitions_total']} valid repetitions × {f(c['window_s_mean'])} s "
        f"(warm-up {f(c['warmup_s'], 'g')} s discarded)"
    )
