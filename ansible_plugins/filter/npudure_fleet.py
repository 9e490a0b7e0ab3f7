"""Values gathered across the hosts of a play or a group: votes, endpoints, what each host needs.

Mirrors the Jinja these replaced, including Jinja's case-insensitive ``unique`` and ``sort``, so the
rendered variables are unchanged (tests/unit/ansible_plugins/test_npudure_fleet.py keeps the renders).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

HostVars = Mapping[str, Mapping[str, Any]]


def _fold(value: Any) -> Any:
    """The key Jinja's unique and sort compare by (strings without case)."""
    return value.lower() if isinstance(value, str) else value


def unique_sorted(values: Iterable[Any]) -> list[Any]:
    """``values | unique | sort`` as Jinja does it: first of each case-folded value, sorted by it."""
    first: dict[Any, Any] = {}
    for value in values:
        first.setdefault(_fold(value), value)
    return sorted(first.values(), key=_fold)


def _vars_of(hostvars: HostVars, host: str) -> Mapping[str, Any]:
    try:
        return hostvars[host]
    except KeyError:
        raise AnsibleFilterError(f"{host!r} is not a host of the inventory") from None


def host_values(hosts: Iterable[str], hostvars: HostVars, name: str) -> dict[str, Any]:
    """HOST -> its variable NAME, for the HOSTS that define it (in the order of HOSTS).

    ``ansible_play_hosts | npudure_host_values(hostvars, '__npudure_rknn_runtime_seen')``.
    """
    found: dict[str, Any] = {}
    for host in hosts:
        hv = _vars_of(hostvars, host)
        if name in hv:
            found[host] = hv[name]
    return found


def majority(values: Iterable[Any]) -> Any:
    """The value most entries have; a tie goes to the lowest (case-insensitive) string; '' when none.

    ``_seen_versions.values() | npudure_majority``: a board with no version yet takes no part.
    """
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise AnsibleFilterError(f"npudure_majority expects a list of values, not {type(values).__name__}")
    votes = list(values)
    best: Any = ""
    best_count = 0
    for value in unique_sorted(votes):
        count = sum(1 for vote in votes if vote == value)
        if count > best_count:
            best, best_count = value, count
    return best


def backend_of(hv: Mapping[str, Any]) -> Any:
    """The inference backend a board's variables choose (npudure_agent_backend, npudure_backend, sim)."""
    return hv.get("npudure_agent_backend", hv.get("npudure_backend", "sim"))


def rknn_convert_hosts(hosts: Iterable[str], hostvars: HostVars) -> list[str]:
    """The HOSTS with the rknn backend and no model named (npudure_agent_model_src): to convert for."""
    out = []
    for host in hosts:
        hv = _vars_of(hostvars, host)
        if backend_of(hv) == "rknn" and not hv.get("npudure_agent_model_src", ""):
            out.append(host)
    return out


def rknn_platforms(hosts: Iterable[str], hostvars: HostVars, default: str) -> list[str]:
    """The NPU platforms of HOSTS (npudure_rknn_runtime_platform, else DEFAULT), each once, sorted."""
    return unique_sorted(
        _vars_of(hostvars, host).get("npudure_rknn_runtime_platform", default) for host in hosts
    )


def endpoints(
    hosts: Iterable[str], hostvars: HostVars, port_var: str, default_port: Any, name_key: str = "name"
) -> list[dict[str, str]]:
    """[{NAME_KEY: node name, address: host:port}] of HOSTS, in their order.

    The node name is npudure_agent_node_name, else the inventory name; the host part ansible_host,
    else the inventory name; the port the host's PORT_VAR, else DEFAULT_PORT.
    """
    out = []
    for host in hosts:
        hv = _vars_of(hostvars, host)
        address = f"{hv.get('ansible_host', host)}:{hv.get(port_var, default_port)}"
        out.append({name_key: hv.get("npudure_agent_node_name", host), "address": address})
    return out


def node_names(hosts: Iterable[str], hostvars: HostVars) -> list[Any]:
    """The name each of HOSTS answers with: npudure_agent_node_name, else the inventory name."""
    return [_vars_of(hostvars, host).get("npudure_agent_node_name", host) for host in hosts]


def wheelhouse_targets(hosts: Iterable[str], hostvars: HostVars) -> list[str]:
    """MACHINE:GLIBC:PYTHON of each of HOSTS from its preflight probe (__npudure_wheelhouse_probe), sorted."""
    out = []
    for host in hosts:
        hv = _vars_of(hostvars, host)
        try:
            probe = json.loads(hv["__npudure_wheelhouse_probe"]["stdout"])
            out.append(f"{probe['machine']}:{probe['libc'][1]}:{probe['python']}")
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise AnsibleFilterError(
                f"{host}: no usable wheelhouse probe (preflight.yml reads MACHINE:GLIBC:PYTHON first): {exc}"
            ) from None
    return unique_sorted(out)


def wheelhouse_extras(
    hosts: Iterable[str], hostvars: HostVars, groups: Mapping[str, Any], known: list[str]
) -> list[str]:
    """The package extras HOSTS need, among KNOWN, sorted: each scheduler host's npudure_scheduler_pip_extras
    (default [controller]) and each board's backend."""
    wanted: list[Any] = []
    for host in hosts:
        hv = _vars_of(hostvars, host)
        if host in groups.get("scheduler", []):
            wanted += hv.get("npudure_scheduler_pip_extras", ["controller"])
        if host in groups.get("boards", []):
            wanted.append(backend_of(hv))
    return unique_sorted(extra for extra in wanted if extra in known)


def wheelhouse_install_sets(hosts: Iterable[str], hostvars: HostVars, groups: Mapping[str, Any]) -> list[str]:
    """build_wheelhouse.py's --install-set values, EXTRAS@TARGET, one per kind of host and target: each
    board installs its backend's extra (onnx, rknn; none for sim), each scheduler host its
    npudure_scheduler_pip_extras (default [controller]), as npudure_common's install names them."""
    out = []
    for host in hosts:
        hv = _vars_of(hostvars, host)
        (target,) = wheelhouse_targets([host], hostvars)
        if host in groups.get("scheduler", []):
            extras = hv.get("npudure_scheduler_pip_extras", ["controller"])
            out.append(f"{','.join(sorted(set(extras)))}@{target}")
        if host in groups.get("boards", []):
            backend = backend_of(hv)
            out.append(f"{backend if backend in ('onnx', 'rknn') else ''}@{target}")
    return unique_sorted(out)


class FilterModule:
    """npudure fleet filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "npudure_host_values": host_values,
            "npudure_majority": majority,
            "npudure_rknn_convert_hosts": rknn_convert_hosts,
            "npudure_rknn_platforms": rknn_platforms,
            "npudure_endpoints": endpoints,
            "npudure_node_names": node_names,
            "npudure_wheelhouse_targets": wheelhouse_targets,
            "npudure_wheelhouse_extras": wheelhouse_extras,
            "npudure_wheelhouse_install_sets": wheelhouse_install_sets,
        }
