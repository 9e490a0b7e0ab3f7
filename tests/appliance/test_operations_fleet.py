"""Operator scenarios on the emulated fleet (root): a rolling change through playbooks/site.yml under
load in both modes at once (one closed loop through the scheduler, one proxyless), judged by
npudure.faults.operations: no failed request and no stretch of 0.5 s or more without a reply.
Reuses a lab that is up with the same shape (tests/appliance/lab_fleet.py). About 5 minutes:
    sudo .venv/bin/pytest -m lab tests/appliance/test_operations_fleet.py -s
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from lab_fleet import provisioned_fleet

pytestmark = [pytest.mark.lab, pytest.mark.slow]


@pytest.fixture(scope="module")
def fleet() -> Iterator:
    with provisioned_fleet(3) as fl:
        yield fl


def _main_pids(fleet) -> dict[str, str]:
    return {
        b: fleet.lab.exec(
            b, ["systemctl", "show", "-p", "MainPID", "--value", "npudure-agent"], timeout=10
        ).stdout.strip()
        for b in fleet.boards
    }


@pytest.mark.timeout(1500)
def test_rolling_change_under_load_costs_no_request(fleet, tmp_path: Path) -> None:
    from npudure.bench.payloads import make_frame_set
    from npudure.faults import fleet as fleetmod
    from npudure.faults.operations import MAX_GAP_S, run_operation, table

    before = fleetmod.read_agent_config(fleet.lab, fleet.boards[0])["postprocess"]["score_threshold"]
    threshold = 0.3 if before != 0.3 else 0.25  # a change on a reused lab too
    overrides = {**fleetmod.DEFAULT_OVERRIDES, "npudure_agent_score_threshold": threshold}
    pids = _main_pids(fleet)
    log = tmp_path / "site.log"
    results = run_operation(
        fleet.scheduler,
        "rolling-change",
        lambda: fleetmod.provision(fleet.lab.inventory_path, overrides, log_file=log),
        make_frame_set("raw", 4, 0),
        3,
        tmp_path,
        budget_s=1200,
    )
    print(table(results))
    # The roll happened: every agent runs the new setting in a new process.
    for board in fleet.boards:
        assert fleetmod.read_agent_config(fleet.lab, board)["postprocess"]["score_threshold"] == threshold
    after = _main_pids(fleet)
    assert all(after[b] != pids[b] for b in fleet.boards), (pids, after)
    assert {r.mode for r in results} == {"scheduler", "proxyless"}
    for r in results:
        assert r.requests > 100, r
        assert r.failed == 0, (r.mode, r.error_codes)
        assert r.longest_gap_s is not None and r.longest_gap_s < MAX_GAP_S, (
            r.mode,
            r.longest_gap_s,
            r.gap_at_s,
        )
        assert r.passed, (r.mode, r.why)
