"""Operator scenarios on the emulated fleet (root): a rolling change through playbooks/site.yml under
load in both modes at once (one closed loop through the scheduler, one proxyless), judged by
npudure_workshop.faults.operations: no failed request and no stretch of 0.5 s (in the boards' time: 0.73 s at
the lab's time scale 10, operations.gap_limit_s) or more without a reply (less
any part of it during which the load generator's own process was stalled: then it measured nothing).
Also a scheduler restart (systemctl restart) under the same load, and a board leaving, the token
rotated and the board back. Runs on the session's 3-board lab, shared with test_faults_fleet.py
(tests/appliance/conftest.py: shared_lab), which it re-provisions.
~20 minutes on the shared 2-core box (the measured roll goes one board at a time):
    sudo .venv/bin/pytest -m lab tests/appliance/test_operations_fleet.py -s
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.lab_fleet import provisioned

from npudure_workshop.faults import fleet as fleetmod
from npudure_workshop.faults.operations import gap_limit_s

pytestmark = [pytest.mark.lab, pytest.mark.slow]

# The lab's boards are this much slower than a board (npudure_workshop.faults.fleet.DEFAULT_OVERRIDES); a
# change may leave clients without a reply for MAX_GAP_S in the boards' time
# (npudure_workshop.faults.operations.gap_limit_s).
TIME_SCALE = float(fleetmod.DEFAULT_OVERRIDES["npudure_agent_sim_time_scale"])  # type: ignore[arg-type]
GAP_LIMIT_S = gap_limit_s(TIME_SCALE)


@pytest.fixture(scope="module")
def fleet(shared_lab) -> Iterator:
    with provisioned(shared_lab) as fl:  # the session's lab, shared with the other fleet module
        yield fl


# ---------------------------------------------------------------- first, on the freshly provisioned lab
# The lab's scheduler serves the DeepStack API (issue #22) and site.yml put Prometheus with the fleet's
# rules on it (issue #18). These run before the operator scenarios, which restart and remove boards.

HTTP_API_PORT = 50080  # roles/npudure_scheduler: npudure_scheduler_http_api_port
# The names of the user's export in the rolling change (ultralytics writes them so in its metadata).
USERS_NAMES_META = "{0: 'cat', 1: 'dog', 2: 'plate'}"
PROMETHEUS_PORT = 9090  # roles/npudure_monitoring: npudure_monitoring_port
SCRAPE_S = 5.0  # npudure_workshop.lab.inventory.SCRAPE_INTERVAL (scrape and evaluation interval)
BOARD_DOWN_FOR_S = 60.0  # monitoring/rules/npudure-alerts.yml: NpudureBoardDown's for:


def _expected_predictions(data: bytes, min_confidence: float) -> list[dict]:
    """What a board must answer for this JPEG, worked out here with the package's own pieces: the
    board's decode and letterbox, the sim backend's SYNTHETIC boxes for that input, the inverse
    letterbox, then the API's filter, order and rounding."""
    from npudure.backends.sim import synthetic_detections
    from npudure.proto import inference_pb2 as pb
    from npudure.scheduler import deepstack
    from npudure.vision.frames import decode_for_model
    from npudure.vision.labels import COCO80
    from npudure_workshop.lab.inventory import SYNTHETIC_DETECTIONS

    image, geometry = decode_for_model(pb.ENCODING_JPEG, data)
    rows = geometry.to_source(synthetic_detections(image, SYNTHETIC_DETECTIONS))
    dets = [
        pb.Detection(
            class_id=int(r[5]), label=COCO80[int(r[5])], score=float(r[4]), x1=r[0], y1=r[1], x2=r[2], y2=r[3]
        )
        for r in rows.tolist()
    ]
    return deepstack.predictions(dets, min_confidence)


# The module's first test: its time includes the fixture's provisioning of the lab (site.yml).
@pytest.mark.timeout(1500)
def test_the_labs_scheduler_serves_frigates_and_a_deepstack_clients_request_with_the_right_boxes(
    fleet,
) -> None:
    import requests
    from helpers.deepstack_requests import FRIGATE_THRESHOLD, jpeg

    from npudure.vision.frames import synthetic_frame
    from npudure.vision.labels import COCO80

    base = f"http://{fleet.lab.node('sched').address}:{HTTP_API_PORT}"
    ping = requests.get(f"{base}/v1/server/status/ping", timeout=10)
    assert ping.status_code == 200, ping.text
    # Frigate's deepstack detector: the 320x320 model-size crop as a PIL JPEG in the field `image`, the
    # api_key field (empty), no min_confidence (DeepStack's 0.4). Its 0.1 s timeout is not applied
    # here: the emulated boards share 2 CPUs with everything else; the loopback tests and the bench
    # measure the timing.
    data = jpeg(synthetic_frame(2, 320))
    url = f"{base}/v1/vision/detection"
    answer = requests.post(url, data={"api_key": ""}, files={"image": data}, timeout=10)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["success"] is True, body
    expected = _expected_predictions(data, FRIGATE_THRESHOLD)
    assert len(expected) >= 2, (
        "the synthetic boxes of this frame leave too little over 0.4: pick another seed"
    )
    assert body["predictions"] == expected
    confidences = [p["confidence"] for p in body["predictions"]]
    assert confidences == sorted(confidences, reverse=True)
    assert all(p["label"] in COCO80 for p in body["predictions"])
    assert body["processedBy"] in fleet.boards, body["processedBy"]
    # min_confidence honoured: a stricter threshold drops the boxes under it, keeps the rest as they were.
    strict = requests.post(url, data={"min_confidence": "0.6"}, files={"image": data}, timeout=10).json()
    assert strict["success"] is True, strict
    assert strict["predictions"] == _expected_predictions(data, 0.6)
    assert 0 < len(strict["predictions"]) < len(expected)
    # A DeepStack client library from the package index (Home Assistant's) gets the same boxes.
    from deepstack.core import DeepstackObject

    sched = fleet.lab.node("sched").address
    client = DeepstackObject(ip=sched, port=HTTP_API_PORT, timeout=10, min_confidence=0.5)
    from_library = client.detect(data)
    assert from_library == _expected_predictions(data, 0.5)
    assert from_library, "no box of this frame over 0.5: pick another seed"


ZMQ_PORT = 5555  # roles/npudure_scheduler: npudure_scheduler_zmq_port


def test_the_labs_scheduler_serves_frigates_zmq_detector_with_the_boxes_of_the_http_api(fleet) -> None:
    """Frigate's own remote detector against the hardened scheduler unit across the lab's network: the
    same picture as a raw tensor over zmq and as a PNG over the HTTP API gives the same boxes. (In the
    sandbox libzmq's bind needs netlink: without AF_NETLINK the scheduler aborted at start.)"""
    import requests
    from helpers.deepstack_requests import png
    from helpers.frigate import FrigateDetector, assert_rows_match_predictions

    from npudure.vision.frames import synthetic_frame

    side = 320
    picture = synthetic_frame(2, side)
    sched = fleet.lab.node("sched").address
    # The patient client: the scheduler's deadline decides (5 s in the lab: npudure_workshop.lab.inventory).
    with FrigateDetector(f"tcp://{sched}:{ZMQ_PORT}", request_timeout_ms=10_000) as detector:
        rows = detector.detect_raw(picture[None])
        assert detector.timeouts == 0
    rows = rows[rows[:, 1] > 0]
    answer = requests.post(
        f"http://{sched}:{HTTP_API_PORT}/v1/vision/detection",
        files={"image": png(picture)},
        data={"min_confidence": "0.01"},
        timeout=10,
    ).json()
    assert_rows_match_predictions(rows, answer["predictions"], side)


def _prometheus(fleet, path: str) -> dict:
    import requests

    url = f"http://{fleet.lab.node('sched').address}:{PROMETHEUS_PORT}{path}"
    reply = requests.get(url, timeout=10)
    reply.raise_for_status()
    return reply.json()["data"]


def _alerts(fleet, name: str) -> dict[str, str]:
    """board -> state (pending/firing) of every ``name`` alert Prometheus holds."""
    alerts = _prometheus(fleet, "/api/v1/alerts")["alerts"]
    return {a["labels"].get("board", "?"): a["state"] for a in alerts if a["labels"]["alertname"] == name}


def _board_down(fleet) -> dict[str, str]:
    return _alerts(fleet, "NpudureBoardDown")


def _targets_up(fleet) -> dict[tuple[str, str], str]:
    targets = _prometheus(fleet, "/api/v1/targets")["activeTargets"]
    return {
        (t["labels"]["job"], t["labels"].get("board", t["labels"]["instance"])): t["health"] for t in targets
    }


@pytest.mark.timeout(600)
def test_prometheus_from_site_yml_scrapes_the_fleet_and_a_stopped_agent_fires_board_down(fleet) -> None:
    """Prometheus on the scheduler host (site.yml's monitoring play, packages from the controller):
    every agent and the scheduler are up in its targets; one agent stopped fires NpudureBoardDown
    within for: + 2 scrapes and resolves once it runs again; a board drained by an operator and
    stopped at the same time raises none."""
    import time

    from npudure.proto import inference_pb2 as pb

    deadline = time.monotonic() + 60  # the first scrapes after provisioning
    while True:
        up = _targets_up(fleet)
        wanted = {("npudure_agent", b) for b in fleet.boards}
        if (
            wanted <= set(up)
            and all(up[t] == "up" for t in wanted)
            and "up" in [h for (job, _), h in up.items() if job == "npudure_scheduler"]
        ):
            break
        assert time.monotonic() < deadline, f"Prometheus' targets are not all up: {up}"
        time.sleep(1)
    assert _board_down(fleet) == {}

    down, drained = fleet.boards[0], fleet.boards[1]
    fleet.cluster.DrainNode(pb.DrainNodeRequest(node=drained, drain=True), timeout=10)
    try:
        stopped = time.monotonic()
        for board in (down, drained):
            done = fleet.lab.exec(board, ["systemctl", "stop", "npudure-agent"], timeout=60)
            assert done.returncode == 0, done.stderr
        limit = BOARD_DOWN_FOR_S + 2 * SCRAPE_S + SCRAPE_S  # + one rule evaluation interval
        while (states := _board_down(fleet)).get(down) != "firing":
            assert drained not in states, f"the drained {drained} raised NpudureBoardDown: {states}"
            assert time.monotonic() - stopped < limit, (
                f"NpudureBoardDown for {down} not firing after {limit:.0f} s"
            )
            time.sleep(1)
        fired_s = time.monotonic() - stopped
        assert drained not in states, states
    finally:
        for board in (down, drained):
            fleet.lab.exec(board, ["systemctl", "start", "npudure-agent"], timeout=60)
        fleet.cluster.DrainNode(pb.DrainNodeRequest(node=drained, drain=False), timeout=10)
    started = time.monotonic()
    while down in _board_down(fleet):
        assert time.monotonic() - started < 4 * SCRAPE_S + 30, "NpudureBoardDown did not resolve"
        time.sleep(1)
    resolved_s = time.monotonic() - started
    print(
        f"NpudureBoardDown fired {fired_s:.1f} s after the agent stopped (for: {BOARD_DOWN_FOR_S:.0f} s, "
        f"scrape {SCRAPE_S:.0f} s) and resolved {resolved_s:.1f} s after it started again"
        " (shared 2-core host)"
    )
    ok, states = fleet.wait_all_up(60)
    assert ok, states


def _clock_alerts(fleet) -> dict[str, str]:
    return _alerts(fleet, "NpudureBoardClockDiverging")


def _query(fleet, expr: str) -> dict[str, str]:
    """The instant vector ``expr`` as {board (or clock): value}."""
    from urllib.parse import quote

    result = _prometheus(fleet, f"/api/v1/query?query={quote(expr)}")["result"]
    return {r["metric"].get("board", r["metric"].get("clock", "")): r["value"][1] for r in result}


@pytest.mark.timeout(900)
def test_a_board_capped_under_load_fires_clock_divergence_and_it_resolves_when_the_cap_is_lifted(
    fleet,
) -> None:
    """One board slowed the way the fault suite does it (the sim CPU cap through the scheduler's
    SetNodeCpuCap, and the host cgroup CPU quota) while a closed loop keeps all three serving: its
    loaded CPU clock falls under 85 % of the fleet's median and NpudureBoardClockDiverging fires for it
    alone, within its for: (the lab's 30 s) + two scrapes + one evaluation + the time the recording
    rule's 2-minute average takes to cross the line; lifted, the alert resolves while the load goes on.
    """
    import threading
    import time

    from npudure_workshop.bench.payloads import make_frame_set
    from npudure_workshop.faults.background import BackgroundLoad
    from npudure_workshop.faults.scenarios import FAULTS
    from npudure_workshop.lab.inventory import ALERT_FOR

    for_s = float(ALERT_FOR["NpudureBoardClockDiverging"].rstrip("s"))
    # avg_over_time(...[2m]) of a clock capped from full speed to SLOW_CAP_MHZ crosses 85 % of the
    # median once ~21 % of the window is capped samples (~25 s); 40 s of it leaves room for the
    # loaded 2-core host.
    average_s = 40.0
    slow = FAULTS["slow"]
    board = fleet.boards[2]
    stop = threading.Event()
    load = BackgroundLoad(
        fleet.scheduler, make_frame_set("raw", 4, 0).requests, 6, 0.0, 600.0, time.perf_counter(), stop=stop
    )
    load.start()
    capped = False
    try:
        deadline = time.monotonic() + 120  # rate over 1m: a few scrapes of load
        while _query(fleet, 'npudure:fleet_clock_boards:count_loaded{clock="cpu"}') != {"cpu": "3"}:
            rates = _query(fleet, "npudure:board_inferences:rate1m")
            assert time.monotonic() < deadline, f"not three loaded boards (> 1 inference/s): {rates}"
            assert load.is_alive(), "the load generator stopped"
            time.sleep(2)
        assert _clock_alerts(fleet) == {}
        slow.inject(fleet, board)
        capped = True
        start = time.monotonic()
        limit = for_s + 2 * SCRAPE_S + SCRAPE_S + average_s
        while (states := _clock_alerts(fleet)).get(board) != "firing":
            assert set(states) <= {board}, f"a board not capped raised NpudureBoardClockDiverging: {states}"
            assert time.monotonic() - start < limit, (
                f"NpudureBoardClockDiverging for {board} not firing after {limit:.0f} s: {states}; "
                f"clocks {_query(fleet, 'npudure:board_clock_hertz:loaded')}"
            )
            time.sleep(1)
        fired_s = time.monotonic() - start
        assert set(states) == {board}, states
        slow.lift(fleet, board)
        capped = False
        lifted = time.monotonic()
        # The capped samples leave the 2-minute average: ~95 s until it is back over 85 %.
        while board in _clock_alerts(fleet):
            assert time.monotonic() - lifted < 120 + 2 * SCRAPE_S + 30, (
                "NpudureBoardClockDiverging did not resolve"
            )
            assert load.is_alive(), "the load generator stopped: the alert would resolve for lack of load"
            time.sleep(1)
        resolved_s = time.monotonic() - lifted
    finally:
        if capped:
            slow.restore(fleet, board)
        stop.set()
        result = load.join()
    assert int(result.samples.ok.sum()) > 0, "the load got no answers"
    print(
        f"NpudureBoardClockDiverging fired {fired_s:.1f} s after {board} was capped ({slow.what}; for: "
        f"{for_s:.0f} s, scrape {SCRAPE_S:.0f} s, 2 min average) and resolved {resolved_s:.1f} s after the "
        "cap was lifted, under a closed loop of 6 (shared 2-core host)"
    )


def _main_pids(fleet) -> dict[str, str]:
    return {
        b: fleet.lab.exec(
            b, ["systemctl", "show", "-p", "MainPID", "--value", "npudure-agent"], timeout=10
        ).stdout.strip()
        for b in fleet.boards
    }


def _sched_pid(fleet) -> str:
    cmd = ["systemctl", "show", "-p", "MainPID", "--value", "npudure-scheduler"]
    return fleet.lab.exec("sched", cmd, timeout=10).stdout.strip()


def _playbook(inventory: Path, name: str, extra: dict, log: Path, *args: str) -> None:
    """ansible-playbook playbooks/NAME against ``inventory``; its output goes to ``log``."""
    import json
    import subprocess

    from npudure_workshop.faults import fleet as fleetmod

    argv = [str(fleetmod.BIN / "ansible-playbook"), "-i", str(inventory), "-e", json.dumps(extra), *args]
    done = subprocess.run(
        [*argv, str(fleetmod.ROOT / "playbooks" / name)],
        cwd=fleetmod.ROOT,
        env=fleetmod.ansible_env(ANSIBLE_FORCE_COLOR="0", NO_COLOR="1"),
        capture_output=True,
        text=True,
        timeout=900,
    )
    log.write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise RuntimeError(
            f"playbooks/{name} exited {done.returncode}: {(done.stdout + done.stderr)[-2000:]}"
        )


def _assert_no_request_lost(results, central_gap_is_reported: bool = False) -> None:
    """0 failed in both modes and no stretch of the gap limit (MAX_GAP_S in the emulated boards' time:
    operations.gap_limit_s) without a reply. With ``central_gap_is_reported`` the scheduler's own restart
    is in the window: central clients then wait for it (waitForReady) and their gap is printed, not
    asserted (issue #16 keeps it open)."""

    assert {r.mode for r in results} == {"scheduler", "proxyless"}
    for r in results:
        assert r.requests > 50, r
        assert r.failed == 0, (r.scenario, r.mode, r.error_codes)
        gap = r.longest_gap_s - r.gap_stalled_s if r.longest_gap_s is not None else None
        if central_gap_is_reported and r.mode == "scheduler":
            print(f"{r.scenario} (central): longest stretch without a reply {r.longest_gap_s:.2f} s")
            continue
        assert gap is not None and gap < GAP_LIMIT_S, (r.scenario, r.mode, r.longest_gap_s, r.gap_at_s)
        assert r.passed, (r.scenario, r.mode, r.why)


def _step(fleet, frames, tmp_path: Path, scenario: str, action, budget_s: float = 900, **kw) -> list:
    """``action`` under load in both modes (run_operation, 3 in flight, ``budget_s``); its table printed."""
    from npudure_workshop.faults.operations import run_operation, table

    results = run_operation(
        fleet.scheduler, scenario, action, frames, 3, tmp_path, budget_s=budget_s, time_scale=TIME_SCALE, **kw
    )
    print(table(results))
    return results


def _board_joins(step, scenario: str, inventory: Path, board: str, extra: dict, log: Path) -> float:
    """site.yml limited to ``board`` and the scheduler (docs/operations.md, Add a board) under load: no
    request lost, and the board serves through the scheduler. Returns the latest of the modes' seconds
    from the play's end to its first served request (negative: it served before the play ended)."""
    from npudure_workshop.faults import fleet as fleetmod

    joined = step(
        scenario,
        lambda: _playbook(inventory, "site.yml", extra, log, "--limit", f"{board},{fleetmod.SCHEDULER_HOST}"),
        watch_board=board,
    )
    _assert_no_request_lost(joined)
    served = [r.board_served_s for r in joined]
    assert all(s is not None for s in served), f"{board} served nothing through the scheduler"
    return max(served)


def _board_leaves(fleet, step, scenario: str, inventory: Path, board: str, log: Path) -> None:
    """remove-board.yml for ``board`` under load: no request lost, and the scheduler lets it go."""
    left = step(
        scenario, lambda: _playbook(inventory, "remove-board.yml", {"npudure_remove_board": board}, log)
    )
    _assert_no_request_lost(left)
    assert board not in [b.name for b in fleet.status().boards]


# The parts of a clone an operator's controller runs site.yml from, besides the package sources.
CONTROLLER_TREE = ("ansible.cfg", "playbooks", "roles", "ansible_plugins", "monitoring", "systemd")


def _second_controller(dest: Path) -> tuple[Path, Path]:
    """Another controller in ``dest``: a fresh copy of the sources (the package as the lab was provisioned
    from, the playbooks and roles) and, beside it, a copy of the inventory folder with its secrets/
    (admin token, pki). Its wheelhouse cache is its own: the dependency downloads are linked from this
    controller's cache (the same files the index serves; fetching them again would only cost time), the
    npudure and workshop wheels are not, so they are built afresh from the copy's path. Returns (tree,
    inventory)."""
    import json
    import shutil

    from npudure_workshop.faults import fleet as fleetmod

    tree = dest / "clone"
    tree.mkdir(parents=True)
    fleetmod.frozen_source(tree)
    for name in CONTROLLER_TREE:
        src = fleetmod.ROOT / name
        if src.is_dir():
            shutil.copytree(src, tree / name, ignore=shutil.ignore_patterns("__pycache__"))
        elif src.is_file():
            shutil.copy2(src, tree / name)
    cache = _wheelhouse_cache(tree / ".cache" / "wheelhouse")
    for state_file in cache.glob("*/state.json"):
        for own in ("npudure-*.whl", "npudure_workshop-*.whl"):  # the two wheels built from the sources
            for wheel in (state_file.parent / "wheels").glob(own):
                wheel.unlink()
        state = json.loads(state_file.read_text())
        state.pop("source", None)
        state_file.write_text(json.dumps(state))
    assert fleetmod.ROOT.resolve() not in tree.resolve().parents
    lab_inventory = fleetmod.ROOT / "inventory" / "lab"
    inventory = dest / "inventory" / "lab"
    shutil.copytree(lab_inventory, inventory, symlinks=True)
    assert (inventory / "secrets" / "admin-token").is_file(), f"no secrets/ folder in {lab_inventory}"
    return tree, inventory / "hosts.yml"


def _changed_tasks(output: str) -> list[tuple[str, str]]:
    """(host, task) of every task an ansible-playbook run reports as changed (default callback)."""
    import re

    changed, task = [], "?"
    for line in output.splitlines():
        header = re.match(r"^(?:TASK|RUNNING HANDLER) \[(.*)\] \**$", line)
        if header:
            task = header.group(1)
            continue
        hit = re.match(r"^changed: \[([^\]]+)\]", line)
        if hit:
            changed.append((hit.group(1), task))
    return changed


def _fleet_identity(fleet) -> dict[str, str]:
    """What must not be re-created: each host's admin token and CA certificate (sha256 of the files)."""
    import hashlib

    found = {}
    for host in [*fleet.boards, "sched"]:
        for name in ("admin-token", "tls/ca.crt"):
            path = fleet.lab.root(host) / "etc" / "npudure" / name
            found[f"{host}:{name}"] = hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else "-"
    return found


def _npudure_wheel_sums(cache: Path) -> dict[str, str]:
    """wheelhouse key -> 'sha256  npudure-....whl' line of its MANIFEST."""
    sums = {}
    for manifest in cache.glob("*/wheels/MANIFEST.sha256"):
        lines = [
            line for line in manifest.read_text().splitlines() if line.split()[-1].startswith("npudure-")
        ]
        sums[manifest.parent.parent.name] = " ".join(lines)
    return sums


# While the fleet runs what this tree builds (the upgrade, last in the module, ships another wheel).
# The timeout covers the module's provisioning too, when this test is run alone (-k).
@pytest.mark.timeout(2100)
def test_a_second_controller_provisions_the_same_fleet_with_nothing_changed(fleet, tmp_path: Path) -> None:
    """docs/operations.md, "Where the identity lives": a fresh copy of the sources in another folder and
    a copy of the inventory folder (secrets/ with the admin token and the CA) run site.yml against the
    provisioned lab: no task changes anything on a host (the second controller's own first wheelhouse
    build, on the controller, is the one change it may report), it builds the same npudure wheel
    (sha256) from its other path, no service restarts (agents' and scheduler's MainPIDs), no token or
    CA is re-created, on the hosts or in the inventory's secrets/."""
    import json
    import subprocess

    from helpers.ansible import recap

    from npudure_workshop.faults import fleet as fleetmod

    tree, inventory = _second_controller(tmp_path / "controller2")
    secrets = {
        p.relative_to(inventory.parent): p.read_bytes()
        for p in (inventory.parent / "secrets").rglob("*")
        if p.is_file()
    }
    pids, sched_pid, identity = _main_pids(fleet), _sched_pid(fleet), _fleet_identity(fleet)
    argv = [
        str(fleetmod.BIN / "ansible-playbook"),
        "-i",
        str(inventory),
        "-e",
        json.dumps(fleetmod.DEFAULT_OVERRIDES),
    ]
    done = subprocess.run(
        [*argv, str(tree / "playbooks" / "site.yml")],
        cwd=tree,
        env=fleetmod.ansible_env(
            ANSIBLE_CONFIG=str(tree / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0", NO_COLOR="1"
        ),
        capture_output=True,
        text=True,
        timeout=1000,
    )
    out = done.stdout + done.stderr
    (tmp_path / "site.log").write_text(out)
    assert done.returncode == 0, (
        f"site.yml from the second controller exited {done.returncode}: {out[-3000:]}"
    )
    print(f"second controller ({tree}), PLAY RECAP: {recap(out)}")
    changed = _changed_tasks(out)
    on_controller = [(h, t) for h, t in changed if h.endswith("-> localhost")]
    print(f"second controller: changed on the controller: {on_controller}")
    assert all("wheelhouse" in t.lower() for _, t in on_controller), on_controller
    on_hosts = [f"{h}: {t}" for h, t in changed if not h.endswith("-> localhost")]
    assert not on_hosts, "the second controller changed the fleet:\n" + "\n".join(on_hosts)
    counted = {h: c["changed"] for h, c in recap(out).items()}
    assert set(counted) >= {*fleet.boards, "sched"}, counted
    assert sum(counted.values()) == len(on_controller), (counted, on_controller)
    # The same wheel from another path (reproducible build), so nothing was reinstalled.
    mine = _npudure_wheel_sums(fleetmod.ROOT / ".cache" / "wheelhouse")
    theirs = _npudure_wheel_sums(tree / ".cache" / "wheelhouse")
    built = {k: v for k, v in theirs.items() if v}
    assert built, f"the second controller built no npudure wheel in {tree / '.cache' / 'wheelhouse'}"
    for key, line in built.items():
        assert line == mine.get(key), (
            f"wheelhouse {key}: npudure wheel {line!r} here, {mine.get(key)!r} on the first controller"
        )
    after = _main_pids(fleet)
    restarted = [b for b in fleet.boards if after[b] != pids[b]]
    assert not restarted, f"agents restarted: {restarted} ({pids} -> {after})"
    assert _sched_pid(fleet) == sched_pid, "the scheduler restarted"
    now = _fleet_identity(fleet)
    assert now == identity, f"re-created on the hosts: {[k for k in identity if now[k] != identity[k]]}"
    kept = {
        p.relative_to(inventory.parent): p.read_bytes()
        for p in (inventory.parent / "secrets").rglob("*")
        if p.is_file()
    }
    assert kept == secrets, (
        f"the second controller rewrote its secrets/: {sorted(set(kept.items()) ^ set(secrets.items()))}"
    )


@pytest.mark.timeout(1500)
def test_a_fourth_board_joins_under_load_and_leaves_again(fleet, tmp_path: Path) -> None:
    """The fleet grows from 3 to 4 boards and back, under load in both modes: `npudure lab add` boots
    board4 into the running lab and puts it in the inventory's boards group; site.yml limited to it and
    the scheduler (docs/operations.md, Add a board) installs it and the scheduler takes it in by a reload
    (same scheduler PID, no agent restarted); then remove-board.yml takes it out again. 0 failed in both."""
    from npudure_workshop.bench.payloads import make_frame_set
    from npudure_workshop.faults import fleet as fleetmod

    inventory = fleet.lab.inventory_path
    assert inventory is not None
    frames = make_frame_set("raw", 4, 0)
    lab = fleet.lab
    sched_pid, pids = _sched_pid(fleet), _main_pids(fleet)
    source = tmp_path / "src"
    source.mkdir()
    extra = {
        **fleetmod.DEFAULT_OVERRIDES,
        "npudure_serial": 1,
        "npudure_wheelhouse_project_dir": str(fleetmod.frozen_source(source)),
    }

    step = functools.partial(_step, fleet, frames, tmp_path)

    board = lab.add(log=print).name
    try:
        import yaml

        boards = yaml.safe_load(inventory.read_text())["all"]["children"]["boards"]["hosts"]
        assert board in boards and board not in fleet.boards, (board, boards)
        served = _board_joins(step, "add-board (4th)", inventory, board, extra, tmp_path / "add.log")
        states = {b.name: b.state for b in fleet.status().boards}
        assert board in states, f"{board} is not in the scheduler's board set: {states}"
        assert _sched_pid(fleet) == sched_pid, "the scheduler restarted instead of reloading its board set"
        assert _main_pids(fleet) == pids, "an agent of the fleet restarted for the new board"
        print(
            f"the 4th board serves {served:.1f} s after its play's end "
            f"({board}; 0.1 s status polls; negative: it served before the play ended)"
        )
        _board_leaves(fleet, step, "remove-board (4th)", inventory, board, tmp_path / "rm.log")
        assert _sched_pid(fleet) == sched_pid, "the scheduler restarted instead of letting the board go"
    finally:
        lab.remove(board, log=print)  # the lab back to its 3 boards, the inventory without board4
    assert [b.name for b in lab.boards] == fleet.boards


@pytest.mark.timeout(600)
def test_a_scheduler_restart_under_load_costs_no_request(fleet, tmp_path: Path) -> None:
    """systemctl restart npudure-scheduler on the scheduler host: central clients (the harness's
    waitForReady channel config, as the README's) wait it out, proxyless ones keep their boards."""
    from npudure_workshop.bench.payloads import make_frame_set

    before = _sched_pid(fleet)

    def restart() -> None:
        done = fleet.lab.exec("sched", ["systemctl", "restart", "npudure-scheduler"], timeout=120)
        assert done.returncode == 0, done.stderr
        ok, states = fleet.wait_all_up(60)  # the restarted scheduler has its boards back
        assert ok, states

    results = _step(fleet, make_frame_set("raw", 4, 0), tmp_path, "scheduler-restart", restart, budget_s=180)
    assert _sched_pid(fleet) != before, "the scheduler was not restarted"
    _assert_no_request_lost(results, central_gap_is_reported=True)


# What the role's "Hand over npudure-scheduler" handler runs on the scheduler host (its defaults).
HANDOVER = [
    "env",
    "STATE_DIRECTORY=/var/lib/npudure-scheduler",
    "/opt/npudure/venv/bin/npudure",
    "scheduler",
    "--config",
    "/etc/npudure/scheduler.yml",
    "--handover",
]


def _sched_restarts(fleet) -> str:
    cmd = ["systemctl", "show", "-p", "NRestarts", "--value", "npudure-scheduler"]
    return fleet.lab.exec("sched", cmd, timeout=10).stdout.strip()


@pytest.mark.timeout(600)
def test_a_scheduler_handover_under_load_costs_no_request(fleet, tmp_path: Path) -> None:
    """The role's handover path on the scheduler host: the running scheduler starts its successor on
    the same port, systemd follows MAINPID= to it (NotifyAccess=all), the old one steps down. Central
    clients see no stretch of MAX_GAP_S without a reply (unlike a restart), proxyless ones keep their
    boards; the unit was not restarted (same NRestarts, active throughout)."""
    from npudure_workshop.bench.payloads import make_frame_set

    before, restarts = _sched_pid(fleet), _sched_restarts(fleet)
    said: list[str] = []

    def hand_over() -> None:
        done = fleet.lab.exec("sched", HANDOVER, timeout=180)
        assert done.returncode == 0, (
            f"exit {done.returncode} (3: the running scheduler predates the handover; provision the lab "
            f"with this tree first): {done.stderr}"
        )
        said.append(done.stdout.strip())
        ok, states = fleet.wait_all_up(60)
        assert ok, states

    results = _step(
        fleet, make_frame_set("raw", 4, 0), tmp_path, "scheduler-handover", hand_over, budget_s=180
    )
    after = _sched_pid(fleet)
    assert after != before, "systemd's MainPID did not move to the successor"
    assert f"pid {after} serves" in said[0], said
    assert _sched_restarts(fleet) == restarts, "the unit was restarted, not handed over"
    active = fleet.lab.exec("sched", ["systemctl", "is-active", "npudure-scheduler"], timeout=10)
    assert active.stdout.strip() == "active", active.stdout
    # The old process finishes its requests (shutdown.grace_s at most) and exits.
    gone = ["sh", "-c", f"for i in $(seq 150); do test -e /proc/{before} || exit 0; sleep 0.1; done; exit 1"]
    assert fleet.lab.exec("sched", gone, timeout=30).returncode == 0, f"pid {before} still runs"
    _assert_no_request_lost(results)


def _inventory_without(fleet, board: str, dest: Path) -> Path:
    """The lab's inventory with ``board`` deleted, as the operator leaves it after remove-board.yml."""
    import yaml

    assert fleet.lab.inventory_path is not None
    inventory = yaml.safe_load(fleet.lab.inventory_path.read_text())
    del inventory["all"]["children"]["boards"]["hosts"][board]
    dest.write_text(yaml.safe_dump(inventory))
    return dest


# ~7.5 min on the lab (444 s measured 2026-12-01, host load ~8): in CI, within the scenarios' budget.
@pytest.mark.timeout(2400)
def test_a_board_leaves_its_token_is_rotated_and_it_joins_again(fleet, tmp_path: Path) -> None:
    """The decommission procedure of docs/operations.md, then the board back, each step under load:
    remove-board.yml (the scheduler lets it go by a reload), rotate-token.yml start and finish on the
    fleet without it (the token it held stops working), site.yml limited to it and the scheduler (it
    joins by a reload; only it restarts). The scheduler never restarts: the rotation reaches it by a
    reload (its unit refreshes its copy of the token; ReloadBoards re-reads it)."""
    from npudure.security import access as security
    from npudure_workshop.bench.payloads import make_frame_set
    from npudure_workshop.faults import fleet as fleetmod

    board = fleet.boards[-1]
    inventory = fleet.lab.inventory_path
    assert inventory is not None
    frames = make_frame_set("raw", 4, 0)
    sched_pid = _sched_pid(fleet)
    others = {b: p for b, p in _main_pids(fleet).items() if b != board}

    step = functools.partial(_step, fleet, frames, tmp_path)

    _board_leaves(fleet, step, "remove-board", inventory, board, tmp_path / "remove.log")
    active = fleet.lab.exec(board, ["systemctl", "is-active", "npudure-agent"], timeout=10).stdout.strip()
    assert active != "active"
    assert not (fleet.lab.root(board) / "etc" / "npudure" / "admin-token").exists()
    assert _sched_pid(fleet) == sched_pid, "the scheduler restarted instead of reloading its board set"

    # The rotation on the fleet without the board (its inventory; the fleet's secrets folder).
    smaller = _inventory_without(fleet, board, tmp_path / "hosts.yml")
    token_file = fleetmod.fleet_token(inventory)
    assert token_file is not None
    old = security.read_tokens(str(token_file))
    assert len(old) == 1, "a rotation is half-way on this lab"
    rotation = {
        **fleetmod.DEFAULT_OVERRIDES,
        "npudure_serial": 1,
        "npudure_secrets_dir": str(token_file.parent),
    }
    source = tmp_path / "src"
    source.mkdir()
    rotation["npudure_wheelhouse_project_dir"] = str(fleetmod.frozen_source(source))
    phases = []
    for phase in ("start", "finish"):
        phases += step(
            f"token-rotation {phase}",
            lambda phase=phase: _playbook(
                smaller,
                "rotate-token.yml",
                {**rotation, "npudure_token_rotation": phase},
                tmp_path / f"rotate-{phase}.log",
            ),
        )
        if phase == "start":
            assert security.read_tokens(str(token_file))[1:] == old
        assert _sched_pid(fleet) == sched_pid, f"the scheduler restarted for the token ({phase})"
    _assert_no_request_lost(phases)
    new = security.read_tokens(str(token_file))
    assert len(new) == 1 and new != old
    for b in others:
        on_board = (fleet.lab.root(b) / "etc" / "npudure" / "admin-token").read_text().split()
        assert on_board == new, f"{b} does not hold only the new token"
    after = _main_pids(fleet)
    assert all(after[b] != others[b] for b in others), (others, after)  # each agent took the new token

    # The board back: site.yml on it and the scheduler alone.
    sched_pid = _sched_pid(fleet)
    served = _board_joins(step, "add-board", inventory, board, {**rotation}, tmp_path / "add.log")
    ok, states = fleet.wait_all_up(30)
    assert ok, states  # every board, the returning one too, UP
    assert _sched_pid(fleet) == sched_pid, "the scheduler restarted instead of reloading its board set"
    assert {b: p for b, p in _main_pids(fleet).items() if b != board} == {b: after[b] for b in others}
    print(
        f"an added board serves within {served:.1f} s of its play's end "
        f"({board}; 0.1 s status polls; negative: it served before the play ended)"
    )


def _bumped_source(dest: Path) -> tuple[Path, str]:
    """A copy of the package sources whose ``npudure.__version__`` is a new local version (the
    tree the tests run from stays as it is); returns (copy, new version)."""
    from npudure import __version__
    from npudure_workshop.faults import fleet as fleetmod

    assert "+" not in __version__, f"{__version__} already has a local part"
    new = f"{__version__}+upgrade.1"
    dest.mkdir()
    init = fleetmod.frozen_source(dest) / "npudure" / "__init__.py"
    text = init.read_text()
    assert f'__version__ = "{__version__}"' in text
    init.write_text(text.replace(f'__version__ = "{__version__}"', f'__version__ = "{new}"'))
    return dest, new


def _wheelhouse_cache(dest: Path) -> Path:
    """A copy of the controller's wheelhouse cache (the role's default folder) for the new version's
    wheel to be built into, so the tree's own cache keeps the tree's wheel: the downloads are hard
    links (the build only adds and unlinks wheels), the files it rewrites are copies."""
    import os
    import shutil

    from npudure_workshop.faults import fleet as fleetmod

    def link(src: str, dst: str) -> None:
        if src.endswith(".whl"):
            try:
                os.link(src, dst)
                return
            except OSError:
                pass
        shutil.copy2(src, dst)

    cache = fleetmod.ROOT / ".cache" / "wheelhouse"
    if cache.is_dir():
        shutil.copytree(cache, dest, copy_function=link, ignore=shutil.ignore_patterns(".lock"))
    else:
        dest.mkdir()
    return dest


def _prebuild_wheel(source: Path, cache: Path) -> None:
    """Build the new version's npudure wheel into the copied cache with the role's own script (the
    steps it takes for changed sources), so site.yml finds it built. In the lab the controller is the
    boards' own 2-core host: a build in the measured window starves the boards (a 0.58 s gap in both
    modes at once, 30 s into the play, measured 2026-12-02); a real controller is another machine."""
    import importlib.util
    import json
    import shutil
    import sys

    from npudure_workshop.faults import fleet as fleetmod

    script = fleetmod.ROOT / "roles" / "npudure_wheelhouse" / "files" / "build_wheelhouse.py"
    spec = importlib.util.spec_from_file_location("build_wheelhouse", script)
    assert spec is not None and spec.loader is not None
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    # Every wheelhouse in the cache (one per dependency key: targets, extras; the role picks one).
    folders = sorted(f for f in cache.iterdir() if (f / "state.json").is_file() and (f / "wheels").is_dir())
    assert folders, f"no wheelhouse in the controller's cache {cache} (the lab was provisioned before)"
    digest, built = build.source_digest(source), None
    for folder in folders:
        wheels = folder / "wheels"
        if built is None:
            built = wheels / build.build_npudure_wheel(sys.executable, source, wheels)
        else:
            for old in wheels.glob("npudure-*.whl"):
                old.unlink()
            shutil.copy2(built, wheels / built.name)
        state = json.loads((folder / "state.json").read_text())
        state["source"] = digest
        (folder / "state.json").write_text(json.dumps(state))
        build.write_manifest(wheels)


def _versions(fleet) -> dict[str, str]:
    """What each running process reports: every agent's GetStatus (straight to the board) and the
    scheduler's GetClusterStatus."""
    from npudure.proto import inference_pb2 as pb
    from npudure.proto import inference_pb2_grpc as rpc
    from npudure.security import access as security

    found = {"sched": fleet.status().scheduler_version}
    for board in fleet.boards:
        with security.channel(fleet.board_address(board)) as channel:
            status = rpc.NodeStub(channel).GetStatus(pb.NodeStatusRequest(), timeout=10)
        found[board] = status.agent_version
    return found


# Last in the module: the fleet then runs a wheel the tree does not build, and a later playbook run with
# the tree's sources (the token rotation's) would reinstall the tree's wheel and restart the scheduler.
# One roll for both changes (a setting and a new version: each agent restarts once for the two), as an
# operator would ship them; a second roll of its own would add ~430 s to CI for the same restarts.
@pytest.mark.timeout(1500)
def test_rolling_change_and_upgrade_under_load_cost_no_request(fleet, tmp_path: Path) -> None:
    """site.yml rolls a changed agent setting, a second model (npudure_models, on one board) and a new
    npudure wheel version (built from a copy of the sources with a bumped version) to the lab, one board
    at a time, under load in both modes: 0 failed, no stretch of MAX_GAP_S without a reply, every agent
    and the scheduler a new process running the new version, never more than one board out of rotation
    at once; then each model is served by its boards over gRPC, HTTP and the proxyless route."""
    from npudure_workshop.bench.payloads import make_frame_set
    from npudure_workshop.faults import fleet as fleetmod

    inventory = fleet.lab.inventory_path
    assert inventory is not None
    before = fleetmod.read_agent_config(fleet.lab, fleet.boards[0])["postprocess"]["score_threshold"]
    threshold = 0.3 if before != 0.3 else 0.25  # a change on a reused lab too
    source, version = _bumped_source(tmp_path / "src")
    old_versions = _versions(fleet)
    assert version not in old_versions.values(), old_versions
    # One board at a time (the role's default; the lab's converging runs go all at once).
    cache = _wheelhouse_cache(tmp_path / "wheelhouse")
    _prebuild_wheel(source, cache)
    extra = {
        **fleetmod.DEFAULT_OVERRIDES,
        "npudure_agent_score_threshold": threshold,
        "npudure_serial": 1,
        "npudure_wheelhouse_project_dir": str(source),
        "npudure_wheelhouse_cache_dir": str(cache),
        # A second model joins in the same roll (#47), on the last board only: a user's export (#44, a
        # 320x320 three-class YOLOv8 file) that the preflight reads and the sim board serves under its
        # size and names. The default keeps the single model's name: renamed mid-roll, unnamed frames
        # could go only to the boards rolled.
        "npudure_models": [
            {"name": "yolov8n", "default": True},
            {"name": "plates", "src": str(_users_export(tmp_path)), "boards": [fleet.boards[-1]]},
        ],
    }
    pids, sched_pid = _main_pids(fleet), _sched_pid(fleet)
    results = _step(
        fleet,
        make_frame_set("raw", 4, 0),
        tmp_path,
        "rolling-change+upgrade",
        lambda: _playbook(inventory, "site.yml", extra, tmp_path / "site.log"),
        budget_s=1200,
    )
    print(f"upgrade: {old_versions} -> {version}")
    # The roll happened: every agent runs the new setting and the new version in a new process.
    for board in fleet.boards:
        assert fleetmod.read_agent_config(fleet.lab, board)["postprocess"]["score_threshold"] == threshold
        installed = fleet.lab.exec(board, ["/opt/npudure/venv/bin/npudure", "--version"], timeout=60)
        assert installed.stdout.split() == ["npudure", version], (board, installed.stdout, installed.stderr)
    after = _main_pids(fleet)
    assert all(after[b] != pids[b] for b in fleet.boards), (pids, after)
    assert _sched_pid(fleet) != sched_pid, "the scheduler still runs the old process"
    running = _versions(fleet)
    assert running == dict.fromkeys(running, version), running
    assert {r.mode for r in results} == {"scheduler", "proxyless"}
    for r in results:
        assert r.requests > 100, r
        assert r.failed == 0, (r.mode, r.error_codes)
        assert r.longest_gap_s is not None and r.longest_gap_s - r.gap_stalled_s < GAP_LIMIT_S, (
            r.mode,
            r.longest_gap_s,
            r.gap_at_s,
        )
        assert r.passed, (r.mode, r.why)
        # One board at a time, and each of them went out (drained) and came back.
        assert r.most_boards_out == 1 and r.boards_out == sorted(fleet.boards), (
            r.most_boards_out,
            r.boards_out,
        )
    _each_model_is_served_by_its_boards(fleet, holder=fleet.boards[-1])
    _a_model_is_replaced_under_load(fleet, extra, tmp_path)


def _a_model_is_replaced_under_load(fleet, extra: dict, tmp_path: Path) -> None:
    """The user retrains `plates` (a fourth class) and runs site.yml for its board (and the scheduler
    host): under load in both modes, 0 failed; the board then serves the new file's names (#47)."""
    from helpers.onnx_graphs import declared_onnx

    from npudure_workshop.bench.payloads import make_frame_set

    holder = fleet.boards[-1]
    folder = tmp_path / "retrained"
    folder.mkdir()
    names = "{0: 'cat', 1: 'dog', 2: 'plate', 3: 'van'}"
    retrained = declared_onnx(folder / "plates.onnx", [1, 3, 320, 320], [[1, 8, 2100]], names)
    models = [
        {"name": "yolov8n", "default": True},
        {"name": "plates", "src": str(retrained), "boards": [holder]},
    ]
    before = _main_pids(fleet)[holder]
    results = _step(
        fleet,
        make_frame_set("raw", 4, 0),
        tmp_path,
        "model-replace",
        lambda: _playbook(
            fleet.lab.inventory_path,
            "site.yml",
            {**extra, "npudure_models": models},
            tmp_path / "replace.log",
            "--limit",
            f"{holder}:scheduler",
        ),
        budget_s=900,
    )
    assert _main_pids(fleet)[holder] != before, "the board did not take the new model"
    _assert_no_request_lost(results)
    base = f"http://{fleet.lab.node('sched').address}:{HTTP_API_PORT}"
    _labelmap_becomes(base, "plates", "0  cat\n1  dog\n2  plate\n3  van\n")


def _labelmap_becomes(base: str, model: str, wanted: str) -> None:
    """The HTTP API's labelmap of ``model`` is ``wanted`` within 30 s (the scheduler's next status poll
    of the board that reports it)."""
    import requests

    deadline = time.monotonic() + 30
    while (text := requests.get(f"{base}/v1/vision/labelmap/{model}", timeout=10).text) != wanted:
        assert time.monotonic() < deadline, f"the labelmap of {model} is still {text!r}"
        time.sleep(1)


def _users_export(folder: Path) -> Path:
    """A user's standard export as the preflight reads it: 320x320, one [1,7,2100] output, three names."""
    from helpers.onnx_graphs import declared_onnx

    return declared_onnx(folder / "plates.onnx", [1, 3, 320, 320], [[1, 7, 2100]], USERS_NAMES_META)


def _each_model_is_served_by_its_boards(fleet, holder: str) -> None:
    """After the roll that added `plates` on one board (npudure_models in site.yml): gRPC through the
    scheduler, HTTP custom/<model> and the proxyless route each send a model's frames to its boards."""
    import grpc
    import requests
    from helpers.deepstack_requests import jpeg

    import npudure
    from npudure.proto import inference_pb2 as pb
    from npudure.proto import inference_pb2_grpc as rpc
    from npudure.vision.frames import synthetic_frame

    frame = pb.InferRequest(encoding=pb.ENCODING_JPEG, frame=jpeg(synthetic_frame(1, 320)))
    with grpc.insecure_channel(fleet.scheduler) as channel:
        stub = rpc.InferenceStub(channel)
        for model, boards in (("plates", {holder}), ("", set(fleet.boards))):
            frame.model = model
            for _ in range(4):
                reply = stub.Infer(frame, timeout=30)
                assert (reply.model, reply.node in boards) == (model or "yolov8n", True), (model, reply.node)
    base = f"http://{fleet.lab.node('sched').address}:{HTTP_API_PORT}"
    listed = requests.get(f"{base}/v1/vision/custom/list", timeout=10).json()["models"]
    assert listed[1:] == ["plates"], listed  # the default first, under http_api.model_name if set
    answer = requests.post(f"{base}/v1/vision/custom/plates", files={"image": frame.frame}, timeout=30).json()
    assert (answer["model"], answer["processedBy"]) == ("plates", holder), answer
    # The user's export is served under its own names (the boards report them; #44).
    _labelmap_becomes(base, "plates", "0  cat\n1  dog\n2  plate\n")
    assert {p["label"] for p in answer.get("predictions", [])} <= {"cat", "dog", "plate"}, answer
    with npudure.connect(fleet.scheduler) as client:
        frame.model = "plates"
        assert {client.infer(frame, timeout=30).node for _ in range(4)} == {holder}
