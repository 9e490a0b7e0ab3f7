"""The model repository of an inventory (``npudure_models``): which boards hold which model.

An entry is ``{name, src, default, boards, contexts}``: ``src`` the .onnx / .rknn on the controller
(optional on sim boards, where a model is a name), ``boards`` where it goes: ``all`` (the default), a
list of board names, or a count (the first N boards of the group, in inventory order). One entry may be
``default: true``, else the first is the default. A board that does not hold the default serves its
first model as its own default. Checked here in one place, so preflight names every problem at once.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ansible.errors import AnsibleFilterError

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")  # npudure.config.ModelName
KEYS = {"name", "src", "default", "boards", "contexts"}
HostVars = Mapping[str, Mapping[str, Any]]


def problems(models: Any, boards: Sequence[str]) -> list[str]:
    """Every problem of the repository, each with its fix; empty when it is usable."""
    if not isinstance(models, list):
        return [f"npudure_models must be a list of models, not {type(models).__name__}"]
    found: list[str] = []
    names: list[str] = []
    defaults = 0
    for i, entry in enumerate(models):
        where = f"npudure_models[{i}]"
        if not isinstance(entry, Mapping):
            found.append(f"{where} must be a mapping with name and src")
            continue
        name = entry.get("name")
        if not isinstance(name, str) or not NAME.match(name):
            found.append(f"{where}: name {name!r} must be 1-64 letters, digits, '.', '_' or '-'")
        else:
            where = f"model {name}"
            if name in names:
                found.append(f"{where} is named twice: give each model a name of its own")
            names.append(name)
        unknown = sorted(set(entry) - KEYS)
        if unknown:
            found.append(f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(KEYS))})")
        defaults += bool(entry.get("default"))
        found += _placement_problems(where, entry.get("boards", "all"), boards)
    if defaults > 1:
        found.append("more than one model has default: true: mark one (or none: the first is the default)")
    return found


def _placement_problems(where: str, placement: Any, boards: Sequence[str]) -> list[str]:
    if placement == "all":
        return []
    if isinstance(placement, bool) or not isinstance(placement, (int, list)):
        return [f"{where}: boards must be all, a list of board names, or a count"]
    if isinstance(placement, int):
        if not 1 <= placement <= len(boards):
            return [f"{where}: boards: {placement} is not a count from 1 to the {len(boards)} boards"]
        return []
    missing = ", ".join(str(b) for b in placement if b not in boards)
    if missing:
        return [f"{where}: boards {missing} are not in the boards group ({', '.join(boards)})"]
    if not placement:
        return [f"{where}: boards is an empty list: name at least one board, or drop the model"]
    return []


def holders(entry: Mapping[str, Any], boards: Sequence[str]) -> list[str]:
    """The boards an entry goes to, in the group's order."""
    placement = entry.get("boards", "all")
    if placement == "all":
        return list(boards)
    if isinstance(placement, int) and not isinstance(placement, bool):
        return list(boards[:placement])
    return [b for b in boards if b in placement]


def _checked(models: Any, boards: Sequence[str]) -> list[Mapping[str, Any]]:
    """The repository, or one error naming every problem (the filters below check it once per call)."""
    found = problems(models, boards)
    if found:
        raise AnsibleFilterError("npudure_models: " + "; ".join(found))
    return list(models)


def _held(models: list[Mapping[str, Any]], host: str, boards: Sequence[str]) -> list[dict[str, Any]]:
    held = [dict(e) for e in models if host in holders(e, boards)]
    if not held:
        return []
    default_name = next((e["name"] for e in models if e.get("default")), models[0]["name"])
    first = next((e for e in held if e["name"] == default_name), held[0])
    ordered = [first, *(e for e in held if e is not first)]
    for entry in ordered:
        entry["default"] = entry is first
    return ordered


def models_of(models: Any, host: str, boards: Iterable[str]) -> list[dict[str, Any]]:
    """The entries ``host`` holds, its default first and marked ``default: true`` (others false)."""
    board_list = list(boards)
    return _held(_checked(models, board_list), host, board_list)


def board_models(models: Any, hosts: Iterable[str], hostvars: HostVars) -> dict[str, list[str]]:
    """Each board's node name (npudure_agent_node_name, else the inventory name) -> the models it holds,
    its default first: the scheduler's ``boards[].models`` until the boards report their own."""
    host_list = list(hosts)
    repository = _checked(models, host_list)
    out = {}
    for host in host_list:
        held = _held(repository, host, host_list)
        if held:
            out[str(hostvars.get(host, {}).get("npudure_agent_node_name", host))] = [e["name"] for e in held]
    return out


def model_holders(
    models: Any, hosts: Iterable[str], hostvars: HostVars, port_var: str, default_port: Any
) -> dict[str, list[str]]:
    """Each model -> the agent addresses (ansible_host or the name, at PORT_VAR or DEFAULT_PORT) of the
    boards that hold it: what verify.yml's per-model answer check sends to."""
    host_list = list(hosts)
    repository = _checked(models, host_list)
    out: dict[str, list[str]] = {}
    for host in host_list:
        hv = hostvars.get(host, {})
        address = f"{hv.get('ansible_host', host)}:{hv.get(port_var, default_port)}"
        for entry in _held(repository, host, host_list):
            out.setdefault(entry["name"], []).append(address)
    return out


def models_cell(served: Any, shown: int = 3) -> str:
    """verify.yml's models column for a board's reported models (``npudure status --json``'s
    ``models``): each as ``name sha256[:12] (N classes: a, b, c +M)``; ``-`` when it reports none."""
    if not isinstance(served, list) or not served:
        return "-"
    cells = []
    for model in served:
        names = [str(n) for n in model.get("class_names") or []]
        listed = ", ".join(names[:shown]) + (f" +{len(names) - shown}" if len(names) > shown else "")
        digest = str(model.get("model_sha256") or "")[:12] or "-"
        cells.append(
            f"{model.get('name', '?')} {digest} ({len(names)} classes: {listed})"
            if names
            else f"{model.get('name', '?')} {digest}"
        )
    return "; ".join(cells)


class FilterModule:
    """npudure model repository filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "npudure_models_problems": problems,
            "npudure_models_of": models_of,
            "npudure_board_models": board_models,
            "npudure_model_holders": model_holders,
            "npudure_models_cell": models_cell,
        }
