"""The fleet filters against what the Jinja programs they replaced rendered with real Ansible
(ansible-core 2.19, the role's vars/main.yml, the same host variables): the expected values below are
those renders."""

from __future__ import annotations

import json

import pytest
from ansible.errors import AnsibleFilterError

from ansible_plugins.filter import npudure_fleet as fleet


def _seen(hostvars: dict) -> dict:
    return fleet.host_values(list(hostvars), hostvars, "__npudure_rknn_runtime_seen")


def test_majority_version_of_the_boards_that_have_one() -> None:
    hostvars = {
        "b1": {"__npudure_rknn_runtime_seen": "2.3.0"},
        "b2": {"__npudure_rknn_runtime_seen": "2.3.0"},
        "b3": {"__npudure_rknn_runtime_seen": "2.1.0"},
        "b4": {"npudure_agent_backend": "sim"},
    }
    seen = _seen(hostvars)
    assert seen == {"b1": "2.3.0", "b2": "2.3.0", "b3": "2.1.0"}
    assert list(seen) == ["b1", "b2", "b3"]  # the play's order
    assert fleet.majority(seen.values()) == "2.3.0"


def test_a_tie_goes_to_the_lowest_version_string() -> None:
    seen = _seen(
        {"b1": {"__npudure_rknn_runtime_seen": "2.3.0"}, "b2": {"__npudure_rknn_runtime_seen": "2.1.0"}}
    )
    assert fleet.majority(seen.values()) == "2.1.0"


def test_votes_count_exactly_but_order_ignores_case_as_jinja_does() -> None:
    # Jinja's unique and sort fold case: of B, a, A, b the candidates are B and a, sorted a, B; each
    # has one exact vote, so the first sorted (a) wins. The Jinja render gave "a".
    assert fleet.majority(["B", "a", "A", "b"]) == "a"


def test_a_new_board_joining_an_rknn_fleet_votes_nothing_and_gets_a_model() -> None:
    # Issue #16: a board with no runtime yet has no __npudure_rknn_runtime_seen.
    hostvars = {"b1": {"npudure_backend": "rknn", "npudure_agent_model_src": ""}}
    seen = _seen(hostvars)
    assert seen == {}
    assert fleet.majority(seen.values()) == ""
    assert fleet.rknn_convert_hosts(["b1"], hostvars) == ["b1"]
    assert fleet.rknn_platforms(["b1"], hostvars, "rk3576") == ["rk3576"]


def test_convert_hosts_and_their_platforms() -> None:
    hostvars = {
        "b1": {"npudure_agent_backend": "rknn"},
        "b2": {"npudure_backend": "rknn", "npudure_rknn_runtime_platform": "rk3588"},
        "b3": {"npudure_agent_backend": "rknn", "npudure_agent_model_src": "/m.rknn"},
        "b4": {"npudure_agent_backend": "sim"},
        "b5": {"npudure_backend": "rknn", "npudure_agent_backend": "onnx"},
    }
    hosts = fleet.rknn_convert_hosts(list(hostvars), hostvars)
    assert hosts == ["b1", "b2"]
    assert fleet.rknn_platforms(hosts, hostvars, "rk3576") == ["rk3576", "rk3588"]


def test_majority_refuses_a_string() -> None:
    with pytest.raises(AnsibleFilterError, match="expects a list"):
        fleet.majority("2.3.0")


def test_an_unknown_host_is_named() -> None:
    with pytest.raises(AnsibleFilterError, match="'b9' is not a host"):
        fleet.host_values(["b9"], {}, "x")


FLEET = {
    "b1": {"ansible_host": "10.0.0.11", "npudure_agent_node_name": "rk-1"},
    "b2": {"npudure_agent_metrics_port": 9100},
    "sched": {"ansible_host": "10.0.0.2"},
}


def test_scrape_endpoints() -> None:
    agents = fleet.endpoints(["b1", "b2"], FLEET, "npudure_agent_metrics_port", 50091, name_key="board")
    assert agents == [{"board": "rk-1", "address": "10.0.0.11:50091"}, {"board": "b2", "address": "b2:9100"}]
    assert list(agents[0]) == ["board", "address"]
    schedulers = fleet.endpoints(["sched"], FLEET, "npudure_scheduler_metrics_port", 50090)
    assert [s["address"] for s in schedulers] == ["10.0.0.2:50090"]
    assert fleet.endpoints([], FLEET, "npudure_agent_metrics_port", 50091) == []


def test_scheduler_board_endpoints() -> None:
    hostvars = {
        "b1": {"ansible_host": "10.0.0.11", "npudure_agent_listen_port": 6000},
        "b2": {"npudure_agent_node_name": "rk-2"},
        "b3": {},
    }
    boards = fleet.endpoints(list(hostvars), hostvars, "npudure_agent_listen_port", 50051)
    # The role drops npudure_scheduler_boards_exclude by name (rejectattr) after this.
    assert [b for b in boards if b["name"] not in ["rk-2"]] == [
        {"name": "b1", "address": "10.0.0.11:6000"},
        {"name": "b3", "address": "b3:50051"},
    ]


def _probe(machine: str, libc: str, python: str) -> dict:
    stdout = json.dumps({"machine": machine, "libc": ["glibc", libc], "python": python})
    return {"__npudure_wheelhouse_probe": {"stdout": stdout}}


def test_wheelhouse_targets_and_extras() -> None:
    hostvars = {
        "b1": {**_probe("aarch64", "2.35", "3.10"), "npudure_agent_backend": "rknn"},
        "b2": {**_probe("aarch64", "2.36", "3.11"), "npudure_backend": "onnx"},
        "b3": _probe("aarch64", "2.35", "3.10"),
        "sched": _probe("x86_64", "2.39", "3.12"),
    }
    groups = {"boards": ["b1", "b2", "b3"], "scheduler": ["sched"]}
    hosts = list(hostvars)
    assert fleet.wheelhouse_targets(hosts, hostvars) == [
        "aarch64:2.35:3.10",
        "aarch64:2.36:3.11",
        "x86_64:2.39:3.12",
    ]
    known = ["bench", "controller", "onnx", "rknn"]
    assert fleet.wheelhouse_extras(hosts, hostvars, groups, known) == ["controller", "onnx", "rknn"]


def test_wheelhouse_extras_keep_only_known_ones() -> None:
    hostvars = {
        "b1": {"npudure_agent_backend": "weird"},
        "sched": {"npudure_scheduler_pip_extras": ["bench", "zzz", "controller"]},
    }
    groups = {"boards": ["b1"], "scheduler": ["sched"]}
    known = ["bench", "controller", "onnx", "rknn"]
    assert fleet.wheelhouse_extras(["b1", "sched"], hostvars, groups, known) == ["bench", "controller"]
    assert fleet.wheelhouse_extras(["b1"], hostvars, {}, known) == []


def test_a_host_without_its_probe_is_named() -> None:
    with pytest.raises(AnsibleFilterError, match="b1: no usable wheelhouse probe"):
        fleet.wheelhouse_targets(["b1"], {"b1": {}})
    with pytest.raises(AnsibleFilterError, match="b1: no usable wheelhouse probe"):
        fleet.wheelhouse_targets(["b1"], {"b1": {"__npudure_wheelhouse_probe": {"stdout": "not json"}}})


def test_the_plugin_lists_every_filter() -> None:
    names = fleet.FilterModule().filters()
    assert names["npudure_majority"] is fleet.majority
    assert all(name.startswith("npudure_") for name in names)


def test_node_names_of_the_boards() -> None:
    hostvars = {"b1": {"npudure_agent_node_name": "rk-1"}, "b2": {}, "b3": {}}
    assert fleet.node_names(["b1", "b2", "b3"], hostvars) == ["rk-1", "b2", "b3"]
    assert fleet.node_names([], hostvars) == []


def test_wheelhouse_install_sets_name_what_each_kind_of_host_installs() -> None:
    def probe(machine: str, python: str) -> dict:
        stdout = json.dumps({"machine": machine, "libc": ["glibc", "2.36"], "python": python})
        return {"__npudure_wheelhouse_probe": {"stdout": stdout}}

    hostvars = {
        "s1": probe("x86_64", "3.11"),
        "b1": {**probe("aarch64", "3.11"), "npudure_agent_backend": "rknn"},
        "b2": {**probe("aarch64", "3.11"), "npudure_agent_backend": "rknn"},
        "b3": {**probe("x86_64", "3.11"), "npudure_agent_backend": "sim"},
        "b4": {**probe("x86_64", "3.12"), "npudure_agent_backend": "onnx"},
    }
    groups = {"scheduler": ["s1"], "boards": ["b1", "b2", "b3", "b4"]}
    assert fleet.wheelhouse_install_sets(list(hostvars), hostvars, groups) == [
        "@x86_64:2.36:3.11",
        "controller@x86_64:2.36:3.11",
        "onnx@x86_64:2.36:3.12",
        "rknn@aarch64:2.36:3.11",
    ]
    hostvars["s1"]["npudure_scheduler_pip_extras"] = ["onnx", "controller"]
    assert "controller,onnx@x86_64:2.36:3.11" in fleet.wheelhouse_install_sets(["s1"], hostvars, groups)
