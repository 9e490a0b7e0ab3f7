"""One emulated machine on the host: its overlay root, its cgroups, its nspawn command line and the
detached launcher that keeps it running."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from npudure_workshop.lab import fakehw
from npudure_workshop.lab.host import LabError, is_mountpoint, mounts_under, run, ssh_keygen
from npudure_workshop.lab.network import HOST_ADDR, Node

CGROUP_ROOT = Path("/sys/fs/cgroup")
LAB_CGROUP = "npudure-lab"
# v1 hierarchies (plus the named systemd one and cgroup2 "unified") a board's launcher joins. cpuset
# is left out: joining it needs cpus/mems set first, and the boards share the host's CPUs anyway.
CGROUP_HIERARCHIES = ("systemd", "unified", "cpu", "cpuacct", "memory", "pids")
CFS_PERIOD_US = 100_000


def cgroup_bases(root: Path = CGROUP_ROOT) -> list[Path]:
    """Where the lab's cgroups go: one per hierarchy on a hybrid/v1 host, the root on a pure v2 host."""
    if (root / "cgroup.controllers").exists():
        return [root / LAB_CGROUP]
    return [root / h / LAB_CGROUP for h in CGROUP_HIERARCHIES if (root / h).is_dir()]


class _InBoardDir:
    """A path in the board's own directory, named once: ``upper = _InBoardDir("upper")``."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, paths: BoardPaths, owner: type | None = None) -> Path:
        return paths.dir / self.name


@dataclass(frozen=True)
class BoardPaths:
    node: Node
    state_dir: Path

    upper = _InBoardDir("upper")  # the overlay's writable layer over the shared image
    work = _InBoardDir("work")  # overlayfs's scratch folder
    root = _InBoardDir("root")  # the merged root the board boots from
    console_log = _InBoardDir("console.log")
    launcher_log = _InBoardDir("launcher.log")
    launcher_pid_file = _InBoardDir("launcher.pid")
    nspawn_pid_file = _InBoardDir("nspawn.pid")
    spec_file = _InBoardDir("launcher.json")

    @property
    def dir(self) -> Path:
        return self.state_dir / "nodes" / self.node.name

    def cgroups(self) -> list[Path]:
        return [base / self.node.name for base in cgroup_bases()]


def nspawn_cmd(node: Node, root: Path, *, fake_proc: bool) -> list[str]:
    """The systemd-nspawn command line for one board (flags per docs/lab.md: each one avoids a trap)."""
    cmd = [
        "systemd-nspawn",
        "--boot",
        f"--directory={root}",
        f"--machine={node.name}",
        f"--hostname={node.name}",
        # No systemd as PID 1 on the host: without both, nspawn fails "Failed to open system bus".
        "--register=no",
        "--keep-unit",
        f"--network-namespace-path=/run/netns/{node.netns}",
        # So a fault test can `ip link set eth0 down` from inside the board.
        "--capability=CAP_NET_ADMIN",
        "--console=read-only",
        "--link-journal=no",
        "--resolv-conf=off",
        "--timezone=off",
        "--setenv=SYSTEMD_COLORS=0",
    ]
    if fake_proc:
        # Sources of binds onto /proc are resolved inside the board's root (they are mounted after
        # the container's /proc); the per-board copy keeps boards from sharing the host's IRQ table.
        cmd += [
            f"--bind={fakehw.PROC_ROOT}/irq:/proc/irq",
            f"--bind-ro={fakehw.PROC_ROOT}/interrupts:/proc/interrupts",
        ]
    return cmd


def hosts_file(node: Node, nodes: list[Node]) -> str:
    lines = ["127.0.0.1\tlocalhost", f"127.0.1.1\t{node.name}", f"{HOST_ADDR}\tnpudure-controller"]
    lines += [f"{n.address}\t{n.name}" for n in nodes if n.name != node.name]
    lines += ["::1\tlocalhost ip6-localhost ip6-loopback"]
    return "\n".join(lines) + "\n"


def mount_overlay(paths: BoardPaths, image: Path) -> None:
    for d in (paths.upper, paths.work, paths.root):
        d.mkdir(parents=True, exist_ok=True)
    opts = f"lowerdir={image},upperdir={paths.upper},workdir={paths.work}"
    run(
        ["mount", "-t", "overlay", f"npudure-{paths.node.name}", "-o", opts, str(paths.root)],
        f"{paths.node.name}: mounting the overlay root",
    )


def personalize(paths: BoardPaths, nodes: list[Node], pubkey: str) -> None:
    """Give the board its own identity, through the overlay so ownership/modes copy up correctly."""
    root = paths.root
    name = paths.node.name
    (root / "etc/hostname").write_text(name + "\n")
    (root / "etc/hosts").write_text(hosts_file(paths.node, nodes))
    (root / "etc/machine-id").write_text(uuid.uuid4().hex + "\n")
    for key in (root / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    ssh_keygen(root / "etc/ssh/ssh_host_ed25519_key", f"root@{name}", f"{name}: generating the SSH host key")
    ssh_dir = root / "root/.ssh"
    ssh_dir.mkdir(mode=0o700, exist_ok=True)
    os.chmod(ssh_dir, 0o700)
    auth = ssh_dir / "authorized_keys"
    auth.write_text(pubkey.strip() + "\n")
    os.chmod(auth, 0o600)
    if paths.node.role == "board":
        fakehw.install(root)


def make_cgroups(paths: BoardPaths) -> None:
    for cg in paths.cgroups():
        cg.mkdir(parents=True, exist_ok=True)
    enable_v2_cpu_controller()


def enable_v2_cpu_controller(root: Path = CGROUP_ROOT) -> bool:
    """On a pure cgroup-v2 host, delegate the ``cpu`` controller from the root to the lab's cgroup and
    from it to the boards' cgroups, so each board gets a ``cpu.max`` (the slow-board fault's quota).
    v2 creates a child's ``cpu.max`` only when the parent lists ``cpu`` in ``cgroup.subtree_control``;
    systemd usually enables it at the root, but nothing enables it under our own npudure-lab group.
    No-op (False) on a v1/hybrid host, where cpu.cfs_quota_us is used, or when the kernel has no cpu
    controller; the lab group holds no process itself, so v2's no-internal-process rule allows it."""
    if not (root / "cgroup.controllers").exists():
        return False
    if "cpu" not in (root / "cgroup.controllers").read_text().split():
        return False
    for parent in (root, root / LAB_CGROUP):
        control = parent / "cgroup.subtree_control"
        try:
            if "cpu" not in control.read_text().split():
                control.write_text("+cpu\n")
        except OSError as exc:
            raise LabError(
                f"cannot enable the cgroup-v2 cpu controller in {control} ({exc}): the slow-board fault "
                "needs it; is another manager holding it (threaded cgroup, or a process in the group)?"
            ) from exc
    return True


def start_launcher(paths: BoardPaths, cmd: list[str], timeout: float = 10) -> int:
    """Start the board's launcher detached (its own session, re-parented to init); return its pid."""
    spec = {
        "name": paths.node.name,
        "nspawn_cmd": cmd,
        "cgroups": [str(c) for c in paths.cgroups()],
        "console_log": str(paths.console_log),
        "launcher_pid_file": str(paths.launcher_pid_file),
        "nspawn_pid_file": str(paths.nspawn_pid_file),
    }
    paths.spec_file.write_text(json.dumps(spec, indent=2) + "\n")
    for f in (paths.launcher_pid_file, paths.nspawn_pid_file):
        f.unlink(missing_ok=True)
    env = {**os.environ, "PATH": "/usr/sbin:/usr/bin:/sbin:/bin:" + os.environ.get("PATH", "")}
    with paths.launcher_log.open("ab") as log:
        # `setsid -f` forks, so the launcher is not our child: no zombie when the caller lives on.
        run_args = [
            "setsid",
            "-f",
            sys.executable,
            "-m",
            "npudure_workshop.lab.launcher",
            str(paths.spec_file),
        ]
        subprocess.run(
            run_args,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd="/",
            check=True,
            timeout=timeout,
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pid = read_pid(paths.launcher_pid_file)
        if pid and read_pid(paths.nspawn_pid_file):
            return pid
        time.sleep(0.05)
    raise LabError(
        f"{paths.node.name}: the launcher did not start within {timeout:.0f} s; see {paths.launcher_log}"
    )


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def process_alive(pid: int | None, must_contain: str = "") -> bool:
    """True when `pid` runs (not a zombie) and its command line contains `must_contain`."""
    if not pid:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    state = stat.rsplit(")", 1)[-1].split()[0]
    return state not in ("Z", "X") and must_contain in cmdline


def launcher_pid(paths: BoardPaths) -> int | None:
    pid = read_pid(paths.launcher_pid_file)
    return pid if process_alive(pid, str(paths.spec_file)) else None


def nspawn_pid(paths: BoardPaths) -> int | None:
    pid = read_pid(paths.nspawn_pid_file)
    return pid if process_alive(pid, f"--directory={paths.root}") else None


def init_pid(paths: BoardPaths) -> int | None:
    """Host pid of the board's systemd (PID 1 inside): the child of nspawn whose namespaced pid is 1."""
    parent = nspawn_pid(paths)
    if not parent:
        return None
    try:
        children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
    except OSError:
        return None
    for child in children:
        try:
            for line in Path(f"/proc/{child}/status").read_text().splitlines():
                if line.startswith("NSpid:") and line.split()[-1] == "1" and len(line.split()) > 2:
                    return int(child)
        except OSError:
            continue
    return None


def cgroup_pids(paths: BoardPaths) -> set[int]:
    pids: set[int] = set()
    for cg in paths.cgroups():
        if not cg.exists():
            continue
        for procs in cg.rglob("cgroup.procs"):
            try:
                pids.update(int(p) for p in procs.read_text().split())
            except (OSError, ValueError):
                continue
    return pids


def stop_signal(paths: BoardPaths) -> None:
    """Ask the board to power off: SIGTERM to its launcher (which passes it on to nspawn)."""
    pid = launcher_pid(paths) or nspawn_pid(paths)
    if pid:
        os.kill(pid, signal.SIGTERM)


def stop(paths: BoardPaths, timeout: float) -> None:
    """Wait up to `timeout` for the board to stop after stop_signal(); SIGKILL whatever is left."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and (launcher_pid(paths) or nspawn_pid(paths) or cgroup_pids(paths)):
        time.sleep(0.1)
    for _ in range(3):
        left = cgroup_pids(paths) | {p for p in (launcher_pid(paths), nspawn_pid(paths)) if p}
        if not left:
            return
        for p in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
        time.sleep(0.3)


def remove_cgroups(paths: BoardPaths) -> list[str]:
    """rmdir the board's cgroups deepest first; return the ones that could not go."""
    failed = []
    for cg in paths.cgroups():
        if not cg.exists():
            continue
        dirs = sorted((p for p in cg.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True)
        for d in [*dirs, cg]:
            try:
                d.rmdir()
            except OSError as exc:
                failed.append(f"{d}: {exc.strerror}")
    return failed


def unmount_all(path: Path) -> None:
    for point in mounts_under(path):
        run(["umount", point], f"unmounting {point}", check=False)
        if is_mountpoint(Path(point)):
            run(["umount", "-l", point], f"lazily unmounting {point}")


def remove_dir(paths: BoardPaths) -> None:
    """Delete the board's folder (upper layer, logs), never while anything is mounted below it."""
    if not paths.dir.exists():
        return
    unmount_all(paths.dir)
    left = mounts_under(paths.dir)
    if left:
        raise LabError(
            f"{paths.node.name}: still mounted: {', '.join(left)}; unmount them, then run "
            f"`npudure lab down` again"
        )
    shutil.rmtree(paths.dir)


def set_cpu_quota(paths: BoardPaths, fraction: float | None, root: Path = CGROUP_ROOT) -> None:
    """Cap the board's CPU time from the host (v1 cfs quota; `CPUQuota=` inside is not enforced here).

    `fraction` is in CPUs: 0.5 = half of one CPU, 1.5 = one and a half; None removes the cap.
    """
    if fraction is not None and fraction <= 0:
        raise LabError(f"CPU quota must be a positive fraction of a CPU (got {fraction})")
    v1 = root / "cpu" / LAB_CGROUP / paths.node.name
    v2 = root / LAB_CGROUP / paths.node.name
    if (v1 / "cpu.cfs_quota_us").exists():
        (v1 / "cpu.cfs_period_us").write_text(f"{CFS_PERIOD_US}\n")
        quota = -1 if fraction is None else max(1000, round(fraction * CFS_PERIOD_US))
        (v1 / "cpu.cfs_quota_us").write_text(f"{quota}\n")
    elif (v2 / "cpu.max").exists():
        value = "max" if fraction is None else str(max(1000, round(fraction * CFS_PERIOD_US)))
        (v2 / "cpu.max").write_text(f"{value} {CFS_PERIOD_US}\n")
    else:
        raise LabError(
            f"{paths.node.name}: no CPU controller for the board's cgroup ({v1} or {v2}); is the lab up? "
            "(cgroup v2: the cpu controller must be enabled in the lab group's cgroup.subtree_control)"
        )
