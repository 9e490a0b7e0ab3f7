"""The preflight/verify comparison filters against the renders of the Jinja they replaced (real
Ansible, compare_facts.yml's and verify.yml's own variables): the expected tables and messages below
are those renders."""

# The expected tables are Ansible's renders line for line; wrapping them would hide the alignment.
# ruff: noqa: E501

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_plugins.filter import npudure_checks as checks

# compare_facts.yml's task variables.
COLUMNS = [
    "host", "new", "soc", "npu_cores", "npu_driver", "librknnrt", "rknn_toolkit_lite2", "kernel", "python",
    "cpu_governors", "npu_clock",
]  # fmt: skip
FAIL = [
    ["soc", "SoC"],
    ["npu_cores", "NPU core count"],
    ["npu_driver", "NPU driver version"],
    ["librknnrt", "librknnrt version"],
    ["rknn_toolkit_lite2", "rknn-toolkit-lite2 version"],
]
WARN = [
    ["kernel", "kernel"],
    ["cpu_governors", "CPU governors"],
    ["npu_clock", "NPU clock"],
    ["python", "Python version"],
]


def facts(**changes: object) -> dict:
    """What roles/npudure_agent/files/board_facts.py reports for a board."""
    return {
        "python": "3.11.2", "python_ok": True, "kernel": "6.1.0", "soc": "rk3588", "npu_cores": 3,
        "npu_driver": "0.9.8", "librknnrt": "2.3.0", "rknn_toolkit_lite2": "2.3.0", "cpu_governors": ["schedutil"],
        "npu_clock": "1000000000", "installed": True, **changes,
    }  # fmt: skip


def differences(rows: list, target: str = "") -> dict:
    return checks.facts_differences(
        rows, fail=FAIL, warn=WARN, installed=["rknn_toolkit_lite2"], present=["librknnrt"], target=target
    )


def test_uniform_boards() -> None:
    rows = checks.facts_rows(
        ["b1", "b2"], {"b1": {"__npudure_board_facts": facts()}, "b2": {"__npudure_board_facts": facts()}}
    )
    assert differences(rows) == {"fail": [], "warn": []}
    assert checks.table(rows, COLUMNS) == [
        "host | new | soc    | npu_cores | npu_driver | librknnrt | rknn_toolkit_lite2 | kernel | python | cpu_governors | npu_clock",
        "b1   | no  | rk3588 | 3         | 0.9.8      | 2.3.0     | 2.3.0              | 6.1.0  | 3.11.2 | ['schedutil'] | 1000000000",
        "b2   | no  | rk3588 | 3         | 0.9.8      | 2.3.0     | 2.3.0              | 6.1.0  | 3.11.2 | ['schedutil'] | 1000000000",
    ]


def test_a_mixed_fleet_with_joining_boards() -> None:
    hostvars = {
        "b1": {"__npudure_board_facts": facts()},
        "b2": {
            "__npudure_board_facts": facts(
                npu_driver="0.9.6", cpu_governors=["performance", "schedutil"], kernel="6.1.99-rockchip-long"
            )
        },
        "b3": {"__npudure_board_facts": facts(soc="rk3576", npu_cores=2, python="3.9.2", python_ok=False)},
        # Joining: no npudure yet; one brings another librknnrt, one none.
        "b4": {"__npudure_board_facts": facts(installed=False, librknnrt="2.1.0", rknn_toolkit_lite2="-")},
        "b5": {"__npudure_board_facts": facts(installed=False, librknnrt="-", rknn_toolkit_lite2="-")},
        "b6": {},  # unreachable: no facts
    }
    rows = checks.facts_rows(list(hostvars), hostvars)
    assert [(row["host"], row["new"]) for row in rows] == [
        ("b1", "no"),
        ("b2", "no"),
        ("b3", "no"),
        ("b4", "yes"),
        ("b5", "yes"),
    ]
    assert differences(rows, target="2.3.0") == {
        "fail": [
            "the boards differ in SoC: rk3588 / rk3576",
            "the boards differ in NPU core count: 3 / 2",
            "the boards differ in NPU driver version: 0.9.8 / 0.9.6",
            "the boards differ in librknnrt version: 2.3.0 / 2.1.0",
            "b4 (joining) has librknnrt 2.1.0, the fleet's target (npudure_rknn_runtime_version) is 2.3.0: install"
            " that version on b4 or give npudure_rknn_runtime_src so the play installs it",
            "b3: Python 3.9.2 is older than 3.10, which the agent needs (Ubuntu 22.04 has 3.10, Debian 12 3.11):"
            " install a newer python3 on b3",
        ],
        "warn": [
            "the boards differ in kernel: 6.1.0 / 6.1.99-rockchip-long",
            "the boards differ in CPU governors: ['schedutil'] / ['performance', 'schedutil']",
            "the boards differ in Python version: 3.11.2 / 3.9.2",
        ],
    }
    assert checks.table(rows, COLUMNS)[1:] == [
        "b1   | no  | rk3588 | 3         | 0.9.8      | 2.3.0     | 2.3.0              | 6.1.0                | 3.11.2 | ['schedutil']                | 1000000000",
        "b2   | no  | rk3588 | 3         | 0.9.6      | 2.3.0     | 2.3.0              | 6.1.99-rockchip-long | 3.11.2 | ['performance', 'schedutil'] | 1000000000",
        "b3   | no  | rk3576 | 2         | 0.9.8      | 2.3.0     | 2.3.0              | 6.1.0                | 3.9.2  | ['schedutil']                | 1000000000",
        "b4   | yes | rk3588 | 3         | 0.9.8      | 2.1.0     | -                  | 6.1.0                | 3.11.2 | ['schedutil']                | 1000000000",
        "b5   | yes | rk3588 | 3         | 0.9.8      | -         | -                  | 6.1.0                | 3.11.2 | ['schedutil']                | 1000000000",
    ]  # fmt: skip


def test_a_joining_board_without_a_fleet_target_differs_only_in_librknnrt() -> None:
    hostvars = {
        "b1": {"__npudure_board_facts": facts()},
        "b2": {"__npudure_board_facts": facts(installed=False, librknnrt="2.1.0", rknn_toolkit_lite2="-")},
    }
    rows = checks.facts_rows(["b1", "b2"], hostvars)
    assert differences(rows) == {
        "fail": ["the boards differ in librknnrt version: 2.3.0 / 2.1.0"],
        "warn": [],
    }


def test_no_board_facts_yet() -> None:
    rows = checks.facts_rows(["b1"], {"b1": {}})
    assert rows == []
    assert differences(rows) == {"fail": [], "warn": []}
    assert checks.table(rows, COLUMNS) == [
        "host | new | soc | npu_cores | npu_driver | librknnrt | rknn_toolkit_lite2 | kernel | python | cpu_governors | npu_clock"
    ]


def test_facts_without_installed_count_as_installed() -> None:
    fact = facts()
    del fact["installed"]
    rows = checks.facts_rows(["b1"], {"b1": {"__npudure_board_facts": fact}})
    assert rows[0]["new"] == "no"
    assert list(rows[0])[-2:] == ["host", "new"]


def test_missing_facts_are_named() -> None:
    fact = facts()
    del fact["npu_driver"]
    rows = checks.facts_rows(["b1"], {"b1": {"__npudure_board_facts": fact}})
    with pytest.raises(AnsibleFilterError, match="the row of b1 has no 'npu_driver'"):
        differences(rows)
    with pytest.raises(AnsibleFilterError, match="the row of b1 has no 'npu_driver'"):
        checks.table(rows, COLUMNS)
    with pytest.raises(AnsibleFilterError, match="b1: the board facts are not a mapping"):
        checks.facts_rows(["b1"], {"b1": {"__npudure_board_facts": "oops"}})


# ------------------------------------------------------------------------------------------ verify.yml


@pytest.mark.parametrize(
    ("plan", "want", "unit", "error", "cell"),
    [
        ({"cpu_affinity": "0,1,2,3"}, "0,1,2,3", "0-3", "", "yes"),
        ({"cpu_affinity": "4-7"}, "4-7", "4 5 6", "", "NO (unit 4 5 6, plan 4-7)"),
        (
            {},
            "",
            "",
            "Traceback: something went very wrong and this message is long enough to be truncated at sixty",
            "NO (no plan: Traceback: something went very wrong and this message is...)",
        ),
        ({"cpu_affinity": "0,2-3"}, "0,2-3", "3,2,0", "", "yes"),
        ({"cpu_affinity": ""}, "", "", "", "yes"),
        ({"cpu_affinity": "4-7"}, "", "", "", "yes"),  # pinning off: want ''
        ({"cpu_affinity": ""}, "", "0-7", "", "NO (unit 0-7, plan unpinned)"),
    ],
)
def test_affinity_cell(plan: dict, want: str, unit: str, error: str, cell: str) -> None:
    assert checks.affinity_cell(plan, want, unit, error) == cell


def test_a_short_plan_error_is_kept_whole() -> None:
    # Jinja's truncate leaves up to 5 characters over the length.
    text = "x" * 65
    assert checks.affinity_cell({}, "", "", text) == f"NO (no plan: {text})"


@pytest.mark.parametrize(
    ("plan", "state", "cell"),
    [
        ({"irqs": [{"irq": 40, "needs_change": False}]}, "active", "yes"),
        ({"irqs": []}, "active", "yes (no NPU IRQ)"),
        ({"cpu_affinity": ""}, "active", "yes (no NPU IRQ)"),
        ({}, "active", "NO (no plan)"),
        ({"irqs": [{"irq": 40, "needs_change": True}]}, "failed", "NO (npudure-irq-affinity.service failed)"),
        (
            {"irqs": [{"irq": 40, "needs_change": True}, {"irq": 41, "needs_change": True}]},
            "active",
            "NO (IRQ 40,41 not on the planned cpus)",
        ),
    ],
)
def test_irq_cell(plan: dict, state: str, cell: str) -> None:
    assert checks.irq_cell(plan, state) == cell


def test_cpu_sets() -> None:
    assert checks.cpu_set("0-3") == checks.cpu_set("0 1 2 3") == checks.cpu_set("3,1,2,0,1") == "0,1,2,3"
    assert checks.cpu_set("") == ""
    with pytest.raises(AnsibleFilterError, match="'a-b' in 'a-b' is not a CPU"):
        checks.cpu_set("a-b")


def row(host: str, **changes: object) -> dict:
    return {
        "host": host, "role": "board", "name": host, "active": "active", "health": "SERVING", "agent_version": "1.0",
        "runtime": "2.3.0", "model_sha256": "abcdef012345", "contexts": "3", "affinity_ok": "yes", "irq_ok": "yes",
        **changes,
    }  # fmt: skip


def scheduler_row(**changes: object) -> dict:
    base = row(
        "sched", role="scheduler", runtime="-", model_sha256="-", contexts="-", affinity_ok="-", irq_ok="-"
    )
    return {**base, "boards_up": ["b1", "b2"], "boards_unreachable": [], **changes}


VERIFY_COLUMNS = [
    "host",
    "active",
    "health",
    "agent_version",
    "runtime",
    "model_sha256",
    "contexts",
    "affinity_ok",
    "irq_ok",
]


def test_a_healthy_fleet() -> None:
    rows = [row("b1"), row("b2", irq_ok="yes (no NPU IRQ)"), scheduler_row()]
    assert checks.verify_problems(rows) == []
    assert checks.table(rows, VERIFY_COLUMNS) == [
        "host  | active | health  | agent_version | runtime | model_sha256 | contexts | affinity_ok | irq_ok",
        "b1    | active | SERVING | 1.0           | 2.3.0   | abcdef012345 | 3        | yes         | yes",
        "b2    | active | SERVING | 1.0           | 2.3.0   | abcdef012345 | 3        | yes         | yes (no NPU IRQ)",
        "sched | active | SERVING | 1.0           | -       | -            | -        | -           | -",
    ]


def test_an_unhealthy_fleet() -> None:
    rows = [
        row("b1", agent_version="?", runtime="2.1.0"),
        row(
            "b2",
            active="failed",
            health="NOT_SERVING",
            affinity_ok="NO (unit unpinned, plan 0-3)",
            irq_ok="NO (no plan)",
            agent_version="1.1",
        ),
        row("b3", name="rk-3", contexts="2", model_sha256="-", health="no answer"),
        scheduler_row(boards_up=["b1"], boards_unreachable=["b2", "b3"], active="inactive"),
    ]
    assert checks.verify_problems(rows) == [
        "b2: service is failed",
        "b2: gRPC health NOT_SERVING",
        "b2: CPUAffinity NO (unit unpinned, plan 0-3)",
        "b2: IRQ affinity NO (no plan)",
        "b3: gRPC health no answer",
        "sched: service is inactive",
        "the boards differ in agent version: 1.1 / 1.0",
        "the boards differ in runtime version: 2.1.0 / 2.3.0",
        "the boards differ in model: abcdef012345 / -",
        "the boards differ in NPU contexts: 3 / 2",
        "sched: board b2 is not UP in the cluster status",
        "sched: board rk-3 is not UP in the cluster status",
        "sched: no gRPC health answer from b2 over the network",
        "sched: no gRPC health answer from b3 over the network",
    ]
    assert checks.table(rows, VERIFY_COLUMNS) == [
        "host  | active   | health      | agent_version | runtime | model_sha256 | contexts | affinity_ok                  | irq_ok",
        "b1    | active   | SERVING     | ?             | 2.1.0   | abcdef012345 | 3        | yes                          | yes",
        "b2    | failed   | NOT_SERVING | 1.1           | 2.3.0   | abcdef012345 | 3        | NO (unit unpinned, plan 0-3) | NO (no plan)",
        "b3    | active   | no answer   | 1.0           | 2.3.0   | -            | 2        | yes                          | yes",
        "sched | inactive | SERVING     | 1.0           | -       | -            | -        | -                            | -",
    ]  # fmt: skip


def test_boards_that_answer_differently_fail_verify_with_check_answers_lines() -> None:
    line = (
        "npudure check-answers: b2 (10.0.0.2:50051): differs from the majority (2 of 3 boards) on 4 frame(s)"
    )
    rows = [row("b1"), row("b2"), scheduler_row(answers=[line])]
    assert checks.verify_problems(rows) == [f"sched: {line}"]
    assert checks.verify_problems([row("b1"), row("b2"), scheduler_row(answers=[])]) == []


def test_a_model_repository_is_checked_model_by_model() -> None:
    """Boards of a repository (#47) differ in their defaults by design; each model must be one file."""
    general, plates = {"general": "a" * 64}, {"general": "a" * 64, "plates": "b" * 64}
    rows = [
        row("b1", model_sha256="aaaaaaaaaaaa", model_hashes=general),
        row("b2", model_sha256="bbbbbbbbbbbb", model_hashes={"plates": "b" * 64}),
        row("b3", model_sha256="aaaaaaaaaaaa", model_hashes=plates),
        scheduler_row(boards_up=["b1", "b2", "b3"]),
    ]
    assert checks.verify_problems(rows) == []
    rows[2]["model_hashes"] = {"general": "a" * 64, "plates": "c" * 64}
    assert checks.verify_problems(rows) == ["the boards differ in model plates: bbbbbbbbbbbb / cccccccccccc"]
    # One model everywhere (no repository, or a repository of one): the default's hash, as before.
    single = [row("b1", model_hashes={"yolov8n": "a" * 64}), row("b2", model_sha256="ffff", model_hashes={})]
    assert checks.verify_problems(single) == ["the boards differ in model: abcdef012345 / ffff"]


def test_no_rows() -> None:
    assert checks.verify_problems([]) == []
    assert checks.table([], VERIFY_COLUMNS) == [
        "host | active | health | agent_version | runtime | model_sha256 | contexts | affinity_ok | irq_ok"
    ]


def test_a_row_without_a_cell_is_named() -> None:
    broken = row("b1")
    del broken["health"]
    with pytest.raises(AnsibleFilterError, match="the row of b1 has no 'health'"):
        checks.verify_problems([broken])
    sched = scheduler_row()
    del sched["boards_up"]
    with pytest.raises(AnsibleFilterError, match="the row of sched has no 'boards_up'"):
        checks.verify_problems([row("b1"), sched])


# ------------------------------------------------------------------------------------------ benchmark.yml


def test_requests_served_in_valid_runs_only() -> None:
    runs = [
        {"run_id": "r1", "valid": True, "boards": {"rk-1": {"samples_ok": 10}, "b2": {"samples_ok": "5"}}},
        {"run_id": "r2", "valid": False, "boards": {"b3": {"samples_ok": 7}}},
        {"run_id": "r3", "valid": True, "boards": {"rk-1": {"samples_ok": 2}, "b3": {"samples_ok": 0}}},
        {"run_id": "r4", "valid": True},
    ]
    assert checks.served_requests(runs) == {"rk-1": 12, "b2": 5, "b3": 0}
    assert checks.served_requests([]) == {}


def test_a_run_without_counts_is_named() -> None:
    with pytest.raises(AnsibleFilterError, match="run r1, board b1: no samples_ok count"):
        checks.served_requests([{"run_id": "r1", "valid": True, "boards": {"b1": {}}}])
    with pytest.raises(AnsibleFilterError, match="has no 'valid'"):
        checks.served_requests([{"run_id": "r1"}])
