"""The lab's pure logic: addresses, inventory, fake hardware, command lines, apt sources. No root."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from npudure_workshop.lab import board, fakehw, image, inventory, network
from npudure_workshop.lab.host import LabError, install_hint, missing_packages


def test_addresses_start_at_11_and_scheduler_at_10():
    nodes = network.plan_nodes(3, scheduler_host=True)
    assert [(n.name, n.address, n.role) for n in nodes] == [
        ("board1", "10.231.0.11", "board"),
        ("board2", "10.231.0.12", "board"),
        ("board3", "10.231.0.13", "board"),
        ("sched", "10.231.0.10", "scheduler"),
    ]
    assert [n.name for n in network.plan_nodes(2, scheduler_host=False)] == ["board1", "board2"]


def test_addresses_are_distinct_and_inside_the_subnet_up_to_the_limit():
    nodes = network.plan_nodes(network.MAX_BOARDS, scheduler_host=True)
    addresses = [n.address for n in nodes]
    assert len(set(addresses)) == len(addresses)
    assert network.HOST_ADDR not in addresses
    assert all(a.startswith("10.231.0.") and 2 <= int(a.rsplit(".", 1)[1]) <= 254 for a in addresses)


@pytest.mark.parametrize("count", [0, -1, network.MAX_BOARDS + 1])
def test_board_count_out_of_range_is_refused(count):
    with pytest.raises(LabError, match="--boards"):
        network.plan_nodes(count, scheduler_host=False)


def test_interface_names_fit_the_kernel_limit():
    for node in network.plan_nodes(network.MAX_BOARDS, scheduler_host=True):
        assert len(node.veth) <= 15 and len(node.veth_peer) <= 15
        assert node.veth != node.veth_peer
        assert node.netns == f"npudure-{node.name}"


def test_inventory_shape(tmp_path):
    key = tmp_path / "ssh" / "id_ed25519"
    nodes = network.plan_nodes(2, scheduler_host=True)
    inv = yaml.safe_load(inventory.to_yaml(inventory.render(nodes, key, backend="onnx", sim_time_scale=2.5)))
    v = inv["all"]["vars"]
    assert v["npudure_agent_sim_time_scale"] == 2.5
    assert v["ansible_user"] == "root"
    assert v["ansible_ssh_private_key_file"] == str(key.resolve())
    assert "StrictHostKeyChecking=no" in v["ansible_ssh_common_args"]
    assert "UserKnownHostsFile=/dev/null" in v["ansible_ssh_common_args"]
    assert v["ansible_python_interpreter"] == "/usr/bin/python3"
    assert v["npudure_lab"] is True
    assert v["npudure_backend"] == "onnx"
    assert v["npudure_agent_sysfs_root"] == "/var/lib/npudure-lab/sys"
    assert v["npudure_irq_proc_root"] == "/var/lib/npudure-lab/proc"
    children = inv["all"]["children"]
    assert children["boards"]["hosts"] == {
        "board1": {"ansible_host": "10.231.0.11"},
        "board2": {"ansible_host": "10.231.0.12"},
    }
    assert children["scheduler"]["hosts"] == {"sched": {"ansible_host": "10.231.0.10"}}


def test_inventory_without_scheduler_host_has_no_scheduler_group(tmp_path):
    inv = inventory.render(network.plan_nodes(1, scheduler_host=False), tmp_path / "k")
    assert set(inv["all"]["children"]) == {"boards"}


def test_inventory_write_round_trips(tmp_path):
    path = tmp_path / "inventory" / "lab" / "hosts.yml"
    data = inventory.render(network.plan_nodes(1, scheduler_host=True), tmp_path / "k")
    inventory.write(path, data)
    text = path.read_text()
    assert text.startswith("#")
    assert yaml.safe_load(text) == data


def test_fake_sysfs_is_big_little_with_real_cpus_in_the_big_cluster(tmp_path):
    fakehw.write_tree(tmp_path, fakehw.sysfs_files())
    cpu = tmp_path / "devices/system/cpu"
    caps = {n: int((cpu / f"cpu{n}/cpu_capacity").read_text()) for n in range(8)}
    assert caps == {0: 1024, 1: 1024, 2: 1024, 3: 1024, 4: 415, 5: 415, 6: 415, 7: 415}
    assert (cpu / "online").read_text().strip() == "0-7"
    # The lab host has CPUs 0-1 only: they must be big, or CPUAffinity= on the big cores fails.
    assert {0, 1} <= set(fakehw.DEFAULT_LAYOUT.big)


def test_fake_sysfs_is_split_by_the_affinity_planner(tmp_path):
    cores = pytest.importorskip("npudure.affinity.cores")
    fakehw.write_tree(tmp_path, fakehw.sysfs_files())
    split = cores.detect(tmp_path)
    assert tuple(split.big) == (0, 1, 2, 3)
    assert tuple(split.little) == (4, 5, 6, 7)


def test_fake_interrupts_have_the_npu_line_and_eight_cpu_columns():
    text = fakehw.proc_files()["interrupts"]
    header = text.splitlines()[0].split()
    assert header == [f"CPU{i}" for i in range(8)]
    npu = [line for line in text.splitlines() if line.strip().startswith(f"{fakehw.NPU_IRQ}:")]
    assert len(npu) == 1
    assert npu[0].split()[-1] == "27700000.npu"
    assert len(npu[0].split()) == 1 + 8 + 4  # "87:", 8 counts, chip, hwirq, trigger, name


def test_fake_interrupts_parse_with_the_affinity_parser():
    irq = pytest.importorskip("npudure.affinity.irq")
    rows = irq.parse_interrupts(fakehw.proc_files()["interrupts"])
    assert {r.number for r in rows} == {i.number for i in fakehw.default_irqs()}
    assert all(len(r.counts) == 8 for r in rows)
    npu = irq.find_device_irqs(rows)
    assert [(d.irq, d.device) for d in npu] == [(87, "27700000.npu")]


def test_fake_irq_tree_has_affinity_files_for_every_irq(tmp_path):
    files = fakehw.proc_files()
    fakehw.write_tree(tmp_path, files)
    assert (tmp_path / "irq/default_smp_affinity").read_text() == "ff\n"
    for irq in fakehw.default_irqs():
        d = tmp_path / "irq" / str(irq.number)
        assert (d / "smp_affinity").read_text() == "ff\n"
        assert (d / "smp_affinity_list").read_text() == "0-7\n"
        assert (d / irq.name).is_dir()
    assert (tmp_path / "irq/87/27700000.npu").is_dir()


def test_install_puts_the_trees_where_the_inventory_says(tmp_path):
    fakehw.install(tmp_path)
    assert (tmp_path / "var/lib/npudure-lab/sys/devices/system/cpu/cpu7/cpu_capacity").read_text() == "415\n"
    assert "27700000.npu" in (tmp_path / "var/lib/npudure-lab/proc/interrupts").read_text()
    assert (tmp_path / "var/lib/npudure-lab/proc/irq/87/smp_affinity").exists()


def test_nspawn_command_line_has_the_flags_this_host_needs(tmp_path):
    node = network.plan_nodes(1, scheduler_host=False)[0]
    cmd = board.nspawn_cmd(node, tmp_path / "root", fake_proc=True)
    assert cmd[0] == "systemd-nspawn"
    for flag in (
        "--boot",
        "--register=no",
        "--keep-unit",
        "--capability=CAP_NET_ADMIN",
        f"--directory={tmp_path / 'root'}",
        "--network-namespace-path=/run/netns/npudure-board1",
        "--machine=board1",
        "--bind=/var/lib/npudure-lab/proc/irq:/proc/irq",
        "--bind-ro=/var/lib/npudure-lab/proc/interrupts:/proc/interrupts",
    ):
        assert flag in cmd
    plain = board.nspawn_cmd(node, tmp_path / "root", fake_proc=False)
    assert not any("/proc/" in c for c in plain)


def test_hosts_file_names_every_other_node():
    nodes = network.plan_nodes(2, scheduler_host=True)
    text = board.hosts_file(nodes[0], nodes)
    assert "127.0.1.1\tboard1" in text
    assert "10.231.0.12\tboard2" in text and "10.231.0.10\tsched" in text
    assert "10.231.0.11" not in text


def test_board_paths_are_per_board(tmp_path):
    a, b = (board.BoardPaths(n, tmp_path) for n in network.plan_nodes(2, scheduler_host=False))
    assert a.upper != b.upper and a.root != b.root
    assert a.upper.is_relative_to(tmp_path)


def test_cgroup_bases_hybrid_and_pure_v2(tmp_path):
    hybrid = tmp_path / "hybrid"
    for h in ("systemd", "unified", "cpu", "memory", "cpuset"):
        (hybrid / h).mkdir(parents=True)
    bases = board.cgroup_bases(hybrid)
    assert bases == [hybrid / h / "npudure-lab" for h in ("systemd", "unified", "cpu", "memory")]
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "cgroup.controllers").write_text("cpu memory\n")
    assert board.cgroup_bases(v2) == [v2 / "npudure-lab"]


DEB822 = """\
Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main
"""


def test_mirror_from_deb822_sources(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d/debian.sources").write_text(DEB822)
    (tmp_path / "sources.list.d/other.list").write_text(
        "deb [signed-by=/x.gpg] https://packages.example/apt cloud-sdk-bookworm main\n"
    )
    assert image.find_mirror(tmp_path) == "http://mirror.example/debian"


def test_mirror_from_one_line_sources(tmp_path):
    (tmp_path / "sources.list").write_text(
        "# deb http://old.example/debian bookworm main\n"
        "deb-src http://src.example/debian bookworm main\n"
        "deb [arch=amd64] http://one.example/debian/ bookworm main contrib\n"
    )
    assert image.find_mirror(tmp_path) == "http://one.example/debian"


def test_no_mirror_is_an_error_that_says_what_to_do(tmp_path):
    with pytest.raises(LabError, match="NPUDURE_LAB_MIRROR"):
        image.find_mirror(tmp_path)


def test_debootstrap_command_is_minbase_with_the_board_packages(tmp_path):
    cmd = image.debootstrap_cmd(tmp_path / "img", "http://m/debian")
    assert cmd[:2] == ["debootstrap", "--variant=minbase"]
    include = next(c for c in cmd if c.startswith("--include=")).split("=", 1)[1].split(",")
    for pkg in ("systemd", "systemd-sysv", "dbus", "openssh-server", "python3", "python3-venv", "iproute2"):
        assert pkg in include
    assert cmd[-3:] == ["bookworm", str(tmp_path / "img"), "http://m/debian"]


def test_half_built_image_is_never_reused(tmp_path):
    img = tmp_path / "img"
    (img / "etc").mkdir(parents=True)
    assert not image.image_ok(img)  # no marker
    (img / image.MARKER).write_text('{"format": 0, "packages": []}')
    assert not image.image_ok(img)  # stale marker


def test_finish_image_removes_shared_identity(tmp_path):
    root = tmp_path
    (root / "var/lib/dbus").mkdir(parents=True)
    (root / "var/lib/dbus/machine-id").write_text("0" * 32 + "\n")
    (root / "etc/ssh").mkdir(parents=True)
    (root / "etc/machine-id").write_text("0" * 32 + "\n")
    (root / "etc/ssh/ssh_host_ed25519_key").write_text("secret")
    image.finish_image(root)
    dbus = root / "var/lib/dbus/machine-id"
    assert dbus.is_symlink() and str(Path(dbus.readlink())) == "/etc/machine-id"
    assert (root / "etc/machine-id").read_text() == ""
    assert not list((root / "etc/ssh").glob("ssh_host_*"))


def test_missing_tools_map_to_an_apt_get_line(tmp_path):
    tools = {"surely-not-a-real-tool-xyz": "fake-package", "sh": "dash"}
    missing = missing_packages(tools, keyring=tmp_path / "absent.gpg")
    assert missing == ["debian-archive-keyring", "fake-package"]
    assert install_hint(missing) == "apt-get install -y debian-archive-keyring fake-package"


def test_cpu_quota_rejects_nonsense(tmp_path):
    paths = board.BoardPaths(network.plan_nodes(1, scheduler_host=False)[0], tmp_path)
    with pytest.raises(LabError, match="positive"):
        board.set_cpu_quota(paths, 0)


def test_cli_parses_nested_actions():
    import argparse

    from npudure_workshop.lab import cli

    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    args = parser.parse_args(["up", "--boards", "4", "--no-scheduler-host", "--backend", "onnx"])
    assert (args.lab_command, args.boards, args.scheduler_host, args.backend) == ("up", 4, False, "onnx")
    args = parser.parse_args(["exec", "board2", "--", "cat", "/proc/interrupts"])
    assert args.board == "board2" and args.cmd[-2:] == ["cat", "/proc/interrupts"]


def test_lab_up_refuses_a_time_scale_that_is_not_positive(tmp_path):
    from npudure_workshop.lab.lab import Lab

    with pytest.raises(LabError, match="--time-scale must be a positive number"):
        Lab(tmp_path / "state").up(boards=1, time_scale=0.0, log=lambda _m: None)


@pytest.mark.parametrize("value", ["0", "-1", "fast"])
def test_lab_up_cli_rejects_a_bad_time_scale_with_usage_exit(value, capsys):
    from npudure.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["lab", "up", "--time-scale", value])
    assert exc.value.code == 2
    assert "--time-scale" in capsys.readouterr().err


def test_inventory_sets_synthetic_detections_and_monitoring_on_the_scheduler_host(tmp_path):
    nodes = network.plan_nodes(2, scheduler_host=True)
    inv = inventory.render(nodes, tmp_path / "k", monitoring_deb_dir="/var/cache/debs")
    assert inv["all"]["vars"]["npudure_agent_sim_synthetic_detections"] == inventory.SYNTHETIC_DETECTIONS > 0
    monitoring = inv["all"]["children"]["monitoring"]
    assert monitoring["hosts"] == {"sched": {}}
    assert monitoring["vars"]["npudure_monitoring_deb_dir"] == "/var/cache/debs"
    assert monitoring["vars"]["npudure_monitoring_scrape_interval"] == inventory.SCRAPE_INTERVAL


def test_inventory_without_fetched_packages_has_no_monitoring_group(tmp_path):
    inv = inventory.render(network.plan_nodes(1, scheduler_host=True), tmp_path / "k")
    assert "monitoring" not in inv["all"]["children"]
