"""The emulated fleet for real: two systemd-nspawn boards on this machine (root; ~10 s once the base
image is cached, the first run builds it in 1-3 min).

Run: ``sudo .venv/bin/pytest -m lab tests/appliance/test_lab_fleet.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from npudure_workshop.lab import Lab, LabError, network
from npudure_workshop.lab import board as boardmod
from npudure_workshop.lab.host import missing_packages

pytestmark = [pytest.mark.lab, pytest.mark.timeout(400)]


def _skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root (mounts, network namespaces, cgroups): run with sudo"
    missing = missing_packages()
    if missing:
        return f"missing Debian packages: apt-get install -y {' '.join(missing)}"
    if network.link_exists(network.BRIDGE):
        return f"another lab is up ({network.BRIDGE} exists): `npudure lab down` it first"
    return None


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    tmp = tmp_path_factory.mktemp("lab")
    lab = Lab(tmp / "state")
    try:
        try:
            lab.up(boards=2, scheduler_host=False, inventory=tmp / "inventory" / "hosts.yml", timeout=90)
        except LabError as exc:
            if "already exist" in str(exc):  # another lab came up since the check above
                pytest.skip(str(exc))
            raise
        yield lab
    finally:
        lab.down(log=lambda _m: None)


def test_every_board_answers_ssh_and_runs_systemd(lab):
    assert [b.name for b in lab.boards] == ["board1", "board2"]
    for b in lab.boards:
        proc = lab.exec(b.name, "timeout 30 systemctl is-system-running --wait; hostname", via="ssh")
        state, hostname = proc.stdout.split()
        assert state in ("running", "degraded"), proc.stdout
        assert hostname == b.name


def test_boards_have_distinct_identity_and_addresses(lab):
    seen = {}
    for b in lab.boards:
        out = lab.exec(b.name, "cat /etc/machine-id; ip -4 -o addr show dev eth0", check=True).stdout
        machine_id, addr_line = out.splitlines()
        assert f"{b.address}/24" in addr_line
        seen[b.name] = (machine_id, b.address)
    ids = [v[0] for v in seen.values()]
    addrs = [v[1] for v in seen.values()]
    assert len(set(ids)) == len(ids) and len(ids[0]) == 32
    assert len(set(addrs)) == len(addrs)
    # The D-Bus machine-id follows /etc/machine-id instead of the image's shared one.
    dbus = lab.exec("board1", ["cat", "/var/lib/dbus/machine-id"], check=True).stdout.strip()
    assert dbus == seen["board1"][0]


def test_inventory_carries_the_time_scale_picked_for_this_host(lab):
    from npudure_workshop.lab import timescale

    inv = yaml.safe_load(lab.inventory_path.read_text())
    picked, _why = timescale.pick(2, os.cpu_count() or 1)
    assert inv["all"]["vars"]["npudure_agent_sim_time_scale"] == picked


def test_fake_hardware_is_visible_inside(lab):
    interrupts = lab.exec("board1", ["cat", "/proc/interrupts"], check=True).stdout
    assert any(line.split()[-1] == "27700000.npu" for line in interrupts.splitlines() if line.strip())
    cap = lab.exec("board1", ["cat", "/var/lib/npudure-lab/sys/devices/system/cpu/cpu5/cpu_capacity"])
    assert cap.stdout.strip() == "415"


def test_irq_affinity_is_writable_and_per_board(lab):
    lab.exec("board1", "echo 30 > /proc/irq/87/smp_affinity", check=True)
    assert lab.exec("board1", ["cat", "/proc/irq/87/smp_affinity"]).stdout.strip() == "30"
    assert lab.exec("board2", ["cat", "/proc/irq/87/smp_affinity"]).stdout.strip() == "ff"
    # What the board wrote is readable from the host, in the board's own layer.
    upper = lab.paths("board1").upper / "var/lib/npudure-lab/proc/irq/87/smp_affinity"
    assert upper.read_text().strip() == "30"


def test_link_down_cuts_the_board_off_and_up_restores_it(lab):
    lab.set_link("board2", False)
    try:
        assert lab.exec("board2", "true", via="ssh", timeout=20).returncode != 0
    finally:
        lab.set_link("board2", True)
    assert lab.exec("board2", "true", via="ssh", timeout=20).returncode == 0


def test_cpu_quota_is_set_on_the_boards_cgroup(lab):
    quota = Path("/sys/fs/cgroup/cpu/npudure-lab/board2/cpu.cfs_quota_us")
    if not quota.exists():
        pytest.skip("no v1 cpu hierarchy on this host")
    lab.set_cpu_quota("board2", 0.25)
    assert quota.read_text().strip() == "25000"
    lab.set_cpu_quota("board2", None)
    assert quota.read_text().strip() == "-1"


def test_a_board_cpu_profile_caps_every_board_and_host_lifts_it(lab):
    """`lab up --board-cpu a72` on the running lab (a reuse) caps both boards at the A72 projection /
    the time scale; a slow-board fault's end gives the budget back; `--board-cpu host` lifts it."""
    v1 = Path("/sys/fs/cgroup/cpu/npudure-lab")
    v2 = Path("/sys/fs/cgroup/npudure-lab")

    def quota(board: str) -> str:
        if (v1 / board / "cpu.cfs_quota_us").exists():
            return (v1 / board / "cpu.cfs_quota_us").read_text().strip()
        return (v2 / board / "cpu.max").read_text().split()[0]

    scale = yaml.safe_load(lab.inventory_path.read_text())["all"]["vars"]["npudure_agent_sim_time_scale"]
    again = {"boards": 2, "scheduler_host": False, "time_scale": scale, "log": lambda _m: None}
    expected = str(round(4 / 3.1 / scale * 100_000))
    try:
        lab.up(board_cpu="a72", **again)
        assert [quota(b) for b in ("board1", "board2")] == [expected, expected]
        lab.set_cpu_quota("board2", 0.01)
        lab.set_cpu_quota("board2", None)
        assert quota("board2") == expected
    finally:
        lab.up(board_cpu="host", **again)
    assert quota("board1") in ("-1", "max")


def test_reboot_comes_back_with_a_new_boot_id(lab):
    before = lab.boot_id("board2")
    lab.reboot("board2", timeout=90)
    after = lab.boot_id("board2")
    assert before and after and after != before
    # The other board did not notice.
    state = lab.exec("board1", ["systemctl", "is-system-running"]).stdout.strip()
    assert state in ("running", "degraded")


def test_down_leaves_nothing_behind(lab):
    all_paths = [lab.paths(n.name) for n in lab.nodes]
    pids = {p for paths in all_paths for p in (boardmod.launcher_pid(paths), boardmod.nspawn_pid(paths)) if p}
    assert len(pids) == 2 * len(all_paths)
    inventory = lab.inventory_path
    assert inventory and inventory.exists()
    state_dir = lab.state_dir

    assert lab.down(log=lambda _m: None) is True

    # Exited launchers are re-parented to PID 1, which reaps them when it gets to it: a zombie is gone.
    assert not any(boardmod.process_alive(p) for p in pids)
    netns = Path("/run/netns")
    assert not (netns.exists() and any(p.name.startswith("npudure-") for p in netns.iterdir()))
    links = {p.name for p in Path("/sys/class/net").iterdir()}
    assert network.BRIDGE not in links and not any(name.startswith("nl-") for name in links)
    mounts = Path("/proc/mounts").read_text()
    assert str(state_dir) not in mounts and "npudure" not in mounts
    assert not any((base / n.name).exists() for base in boardmod.cgroup_bases() for n in lab.nodes or [])
    for paths in all_paths:
        assert not paths.dir.exists()
        assert not any(c.exists() for c in paths.cgroups())
    assert not inventory.exists()
    assert lab.down(log=lambda _m: None) is False  # safe to run twice
