"""The fleet comparisons of preflight and verify: the facts table, what differs, what is unhealthy.

Mirrors the Jinja these replaced (Jinja's case-insensitive ``unique``, ``truncate``'s leeway of 5), so
the tables and messages are unchanged (tests/unit/ansible_plugins/test_npudure_checks.py keeps them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ansible.errors import AnsibleFilterError

Row = Mapping[str, Any]
# Jinja's truncate: a string at most this much longer than the length is left whole.
TRUNCATE_LEEWAY = 5


def _unique(values: Iterable[Any]) -> list[Any]:
    """``values | unique`` as Jinja does it: the first of each value, strings compared without case."""
    first: dict[Any, Any] = {}
    for value in values:
        first.setdefault(value.lower() if isinstance(value, str) else value, value)
    return list(first.values())


def _cell(row: Row, key: str, what: str) -> Any:
    try:
        return row[key]
    except (KeyError, TypeError):
        host = row.get("host", "?") if isinstance(row, Mapping) else "?"
        raise AnsibleFilterError(f"{what}: the row of {host} has no {key!r}") from None


def table(rows: Sequence[Row], columns: Sequence[str]) -> list[str]:
    """The lines of a text table of ROWS: a header of COLUMNS, cells padded and joined by ' | '."""
    widths = [
        max([len(column)] + [len(str(_cell(row, column, "npudure_table"))) for row in rows])
        for column in columns
    ]
    header = {column: column for column in columns}
    return [
        " | ".join(
            str(row[column]).ljust(width) for column, width in zip(columns, widths, strict=True)
        ).strip()
        for row in [header, *rows]
    ]


def facts_rows(hosts: Iterable[str], hostvars: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per host of HOSTS with board facts (__npudure_board_facts): the facts, ``host`` and
    ``new`` ('yes' for a board without npudure installed yet, 'no' otherwise)."""
    rows = []
    for host in hosts:
        facts = hostvars[host].get("__npudure_board_facts")
        if facts is None:
            continue
        if not isinstance(facts, Mapping):
            raise AnsibleFilterError(f"{host}: the board facts are not a mapping: {facts!r}")
        rows.append({**facts, "host": host, "new": "no" if facts.get("installed", True) else "yes"})
    return rows


def facts_differences(
    rows: Sequence[Row],
    fail: Sequence[Sequence[str]],
    warn: Sequence[Sequence[str]],
    installed: Sequence[str] = (),
    present: Sequence[str] = (),
    target: str = "",
) -> dict[str, list[str]]:
    """{'fail': [...], 'warn': [...]}: the keys of FAIL and WARN ([key, label] pairs) where ROWS differ.

    INSTALLED keys are compared among the boards with npudure installed only (a joining board gets the
    fleet's version); PRESENT keys among the boards that report one ('-' = none). A joining board with a
    librknnrt other than TARGET, and any board whose Python is too old for the agent, fail too.
    """
    out: dict[str, list[str]] = {"fail": [], "warn": []}
    for kind, pairs in (("fail", fail), ("warn", warn)):
        for key, label in pairs:
            if key in installed:
                compared = [row for row in rows if row.get("new") == "no"]
            elif key in present:
                compared = [row for row in rows if row.get(key) != "-"]
            else:
                compared = list(rows)
            seen = _unique(str(_cell(row, key, "npudure_facts_differences")) for row in compared)
            if len(seen) > 1:
                out[kind].append(f"the boards differ in {label}: {' / '.join(seen)}")
    for row in rows:
        librknnrt = _cell(row, "librknnrt", "npudure_facts_differences")
        if row.get("new") == "yes" and target and librknnrt not in ("-", target):
            host = row["host"]
            out["fail"].append(
                f"{host} (joining) has librknnrt {librknnrt}, the fleet's target"
                f" (npudure_rknn_runtime_version) is {target}: install that version on {host}"
                " or give npudure_rknn_runtime_src so the play installs it"
            )
    for row in rows:
        if not _cell(row, "python_ok", "npudure_facts_differences"):
            host = row["host"]
            out["fail"].append(
                f"{host}: Python {row.get('python')} is older than 3.10, which the agent needs"
                f" (Ubuntu 22.04 has 3.10, Debian 12 3.11): install a newer python3 on {host}"
            )
    return out


def cpu_set(text: Any) -> str:
    """A CPU list as systemd or the plan write it ('0-3', '0 1 2 3', '0,2-3') in one spelling: '0,1,2,3'."""
    cpus: set[int] = set()
    for part in str(text).replace(" ", ",").split(","):
        if not part:
            continue
        ends = part.split("-")
        try:
            cpus.update(range(int(ends[0]), int(ends[-1]) + 1))
        except ValueError:
            raise AnsibleFilterError(
                f"npudure_cpu_set: {part!r} in {text!r} is not a CPU or a CPU range"
            ) from None
    return ",".join(str(cpu) for cpu in sorted(cpus))


def _truncate(text: str, length: int, end: str = "...") -> str:
    """Jinja's truncate (whole words, leeway 5)."""
    if len(text) <= length + TRUNCATE_LEEWAY:
        return text
    return text[: length - len(end)].rsplit(" ", 1)[0] + end


def affinity_cell(plan: Mapping[str, Any], want: str, unit: str, plan_error: str = "") -> str:
    """The verify table's CPUAffinity cell: 'yes' when the unit's CPUs (UNIT) are the plan's (WANT),
    compared as sets; else 'NO (...)' with both, or with why there is no PLAN (PLAN_ERROR)."""
    if len(plan) == 0:
        return f"NO (no plan: {_truncate(plan_error.strip(), 60)})"
    if cpu_set(want) == cpu_set(unit):
        return "yes"
    return f"NO (unit {unit or 'unpinned'}, plan {want or 'unpinned'})"


def irq_cell(plan: Mapping[str, Any], service_state: str) -> str:
    """The verify table's IRQ cell: 'yes' when every NPU IRQ of PLAN is on its planned CPUs and the
    npudure-irq-affinity service is active (SERVICE_STATE); 'NO (...)' says what is not."""
    if len(plan) == 0:
        return "NO (no plan)"
    if service_state != "active":
        return f"NO (npudure-irq-affinity.service {service_state})"
    irqs = plan.get("irqs", [])
    pending = [str(irq["irq"]) for irq in irqs if irq.get("needs_change")]
    if pending:
        return f"NO (IRQ {','.join(pending)} not on the planned cpus)"
    return "yes (no NPU IRQ)" if len(irqs) == 0 else "yes"


# The columns the boards must agree on, with their labels.
UNIFORM = (
    ("agent_version", "agent version"),
    ("runtime", "runtime version"),
    ("model_sha256", "model"),
    ("contexts", "NPU contexts"),
)
# What every row of verify.yml's table has.
VERIFY_KEYS = ("host", "role", "active", "health", "affinity_ok", "irq_ok")


def verify_problems(rows: Sequence[Row]) -> list[str]:
    """What verify.yml fails on, one line each: a service not active, gRPC health not SERVING, affinity
    not as planned, boards that differ in version, runtime, model or NPU contexts ('?' = unknown),
    boards the scheduler does not see UP or cannot reach, and boards that answer the same frames
    differently (the scheduler row's ``answers``)."""
    out = []
    for row in rows:
        for key in VERIFY_KEYS:
            _cell(row, key, "npudure_verify_problems")
        host = row["host"]
        if row["active"] != "active":
            out.append(f"{host}: service is {row['active']}")
        if row["health"] != "SERVING":
            out.append(f"{host}: gRPC health {row['health']}")
        if row["affinity_ok"] not in ("yes", "-"):
            out.append(f"{host}: CPUAffinity {row['affinity_ok']}")
        if not (row["irq_ok"].startswith("yes") or row["irq_ok"] == "-"):
            out.append(f"{host}: IRQ affinity {row['irq_ok']}")
    boards = [row for row in rows if row.get("role") == "board"]
    # Boards of a model repository (#47) hold different models by design: each model must be the same
    # file wherever it is (``model_hashes``: name -> sha256), not every board the same default.
    held = [row.get("model_hashes") or {} for row in boards]
    # A repository: a board serves several models, or boards that report theirs report different ones.
    sets = {frozenset(models) for models in held if models}
    repository = len(sets) > 1 or any(len(models) > 1 for models in sets)
    for name in sorted(set().union(*sets)) if repository else ():
        hashes = _unique(models[name] for models in held if name in models)
        if len(hashes) > 1:
            out.append(f"the boards differ in model {name}: {' / '.join(str(h)[:12] for h in hashes)}")
    for key, label in UNIFORM:
        if repository and key == "model_sha256":
            continue
        seen = _unique(
            value for value in (_cell(row, key, "npudure_verify_problems") for row in boards) if value != "?"
        )
        if len(seen) > 1:
            out.append(f"the boards differ in {label}: {' / '.join(str(value) for value in seen)}")
    names = [_cell(row, "name", "npudure_verify_problems") for row in boards]
    for row in rows:
        if row.get("role") != "scheduler":
            continue
        up = _cell(row, "boards_up", "npudure_verify_problems")
        for name in _unique_exact(name for name in names if name not in up):
            out.append(f"{row['host']}: board {name} is not UP in the cluster status")
        for name in _cell(row, "boards_unreachable", "npudure_verify_problems"):
            out.append(f"{row['host']}: no gRPC health answer from {name} over the network")
        # `npudure check-answers` from the scheduler host: the boards whose detections differ.
        out.extend(f"{row['host']}: {line}" for line in row.get("answers") or [])
    return out


def _unique_exact(values: Iterable[Any]) -> list[Any]:
    """Each value once, in order, case kept (Ansible's ``difference`` on lists)."""
    out: list[Any] = []
    for value in values:
        if value not in out:
            out.append(value)
    return out


def served_requests(runs: Iterable[Row]) -> dict[str, int]:
    """Board name -> requests it served (``samples_ok``) over the valid RUNS of a benchmark summary."""
    served: dict[str, int] = {}
    for run in runs:
        if not _cell(run, "valid", "npudure_served_requests"):
            continue
        for name, board in run.get("boards", {}).items():
            try:
                served[name] = served.get(name, 0) + int(board["samples_ok"])
            except (KeyError, TypeError, ValueError):
                run_id = run.get("run_id", "?")
                raise AnsibleFilterError(
                    f"npudure_served_requests: run {run_id}, board {name}: no samples_ok count"
                ) from None
    return served


class FilterModule:
    """npudure check filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "npudure_table": table,
            "npudure_facts_rows": facts_rows,
            "npudure_facts_differences": facts_differences,
            "npudure_cpu_set": cpu_set,
            "npudure_affinity_cell": affinity_cell,
            "npudure_irq_cell": irq_cell,
            "npudure_verify_problems": verify_problems,
            "npudure_served_requests": served_requests,
        }
