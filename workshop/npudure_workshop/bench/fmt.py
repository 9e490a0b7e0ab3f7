"""Number and table formatting shared by the report, the terminal summary and the experiments."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
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
    """A Markdown table (the report): cells as they are, no padding."""
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def text_table(
    header: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    sep: str = "  ",
    rule: bool = False,
    align: str = "l",
    indent: str = "",
    min_widths: Sequence[int] = (),
) -> list[str]:
    """A table for the terminal, as lines: each column as wide as its widest cell (or ``min_widths``).

    ``align`` has a letter a column, ``l`` or ``r`` (figures line up on their last digit); the last letter
    holds for the columns after it, so ``"lr"`` is a name and its figures. ``rule`` puts a line of dashes
    under the header, crossed where ``sep`` has a ``|``. Trailing spaces go.
    """
    cells = [[str(c) for c in header], *([str(c) for c in row] for row in rows)]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    widths = [max(w, m) for w, m in zip(widths, [*min_widths, *[0] * len(widths)], strict=False)]
    sides = [align[min(i, len(align) - 1)] for i in range(len(widths))]

    def line(row: Sequence[str]) -> str:
        padded = [c.rjust(w) if a == "r" else c.ljust(w) for c, w, a in zip(row, widths, sides, strict=True)]
        return (indent + sep.join(padded)).rstrip()

    out = [line(r) for r in cells]
    if rule:
        out.insert(1, indent + sep.replace(" ", "-").replace("|", "+").join("-" * w for w in widths))
    return out


def section(title: str, name: str, intro: str = "") -> list[str]:
    """The opening lines of a report section: its heading names the series; ``intro`` says how to read it."""
    return [f"## {title} ({name})", "", *([intro, ""] if intro else [])]


@dataclass(frozen=True)
class LatencyColumns:
    """Latency columns of a report table (keys of a latency statistics dict, in ms): the header and the
    cells come from the same keys, so they cannot drift apart."""

    keys: tuple[str, ...]

    @property
    def labels(self) -> list[str]:
        return [k.replace("_", ".") for k in self.keys]  # p99_9 → "p99.9"

    @property
    def header(self) -> list[str]:
        return [f"{label} ms" for label in self.labels]

    def cells(self, latency: dict[str, Any]) -> list[str]:
        return [f(latency[k]) for k in self.keys]

    def inline(self, latency: dict[str, Any]) -> str:
        """The same figures on one line of the terminal summary: ``p50 12.0 p99 30.1 ms``."""
        return (
            " ".join(f"{label} {cell}" for label, cell in zip(self.labels, self.cells(latency), strict=True))
            + " ms"
        )


def figures(name: str, plots: Sequence[tuple[str, str]]) -> list[str]:
    """A report section's closing figure links, one a (alt text, suffix) pair: the PNG each experiment's
    ``plots`` writes as ``plots/{name}_{suffix}.png``."""
    lines = [""]
    for alt, suffix in plots:
        lines += [f"![{alt}](plots/{name}_{suffix}.png)", ""]
    return lines


def warning_items(warnings: Sequence[str]) -> list[str]:
    """An aggregate's warnings as report list items."""
    return [f"- ⚠ {w}" for w in warnings]


def warning_lines(warnings: Sequence[str]) -> list[str]:
    """An aggregate's warnings as terminal summary lines."""
    return [f"  warning: {w}" for w in warnings]


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
