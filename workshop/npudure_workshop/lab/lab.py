"""The emulated fleet as one object: ``Lab(state_dir).up(boards=3)``, ``.exec()``, ``.reboot()``,
``.set_link()``, ``.set_cpu_quota()``, ``.down()``.

Everything ``up`` creates is written to ``<state_dir>/lab.json`` before it is created, so ``down``
removes exactly that (and is safe to run twice, or after an ``up`` that failed half-way).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shlex
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from npudure_workshop.lab import board as boardmod
from npudure_workshop.lab import board_cpu as board_cpu_mod
from npudure_workshop.lab import image as imagemod
from npudure_workshop.lab import inventory as invmod
from npudure_workshop.lab import network as net
from npudure_workshop.lab import timescale
from npudure_workshop.lab.host import SBIN_PATH, LabError, is_mountpoint, preflight, run, ssh_keygen

DEFAULT_STATE_DIR = Path("/var/lib/npudure/lab")
NSPAWN_RUN_DIR = Path("/run/systemd/nspawn")
STATE_FILE = "lab.json"
STATE_FORMAT = 1
BOARD_BOOT_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 15.0

Log = Callable[[str], None]


@contextlib.contextmanager
def machine_lock(log: Log, timeout: float = imagemod.BUILD_TIMEOUT_S + 120):
    """One `lab up`/`lab down` at a time on this machine: the lab's names are machine-wide, and two
    racing `up`s would each take the other's bridge for their own. The lock is the image cache's
    parent folder (kept between runs), so nothing is left behind."""
    lock_dir = imagemod.cache_dir().parent
    lock_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_dir, os.O_RDONLY)
    try:
        deadline = time.monotonic() + timeout
        told = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise LabError(
                        f"another `npudure lab` command held {lock_dir} for {timeout:.0f} s; "
                        "wait for it or find it with `fuser -v " + str(lock_dir) + "`"
                    ) from None
                if not told:
                    log(f"waiting for another `npudure lab up/down` to finish (lock on {lock_dir})")
                    told = True
                time.sleep(0.5)
        yield
    finally:
        os.close(fd)


def default_state_dir() -> Path:
    return Path(os.environ.get("NPUDURE_LAB_STATE") or DEFAULT_STATE_DIR)


def ssh_base(key: Path, connect_timeout: int = 5) -> list[str]:
    return [
        "ssh",
        "-i",
        str(key),
        "-o",
        "StrictHostKeyChecking=no",
        "-o",
        "UserKnownHostsFile=/dev/null",
        "-o",
        "LogLevel=ERROR",
        "-o",
        "BatchMode=yes",
        "-o",
        f"ConnectTimeout={connect_timeout}",
    ]


@dataclass
class NodeStatus:
    name: str
    address: str
    role: str
    nspawn_pid: int | None
    systemd: str
    ssh_ok: bool


class Lab:
    def __init__(self, state_dir: Path | str | None = None) -> None:
        self.state_dir = Path(state_dir) if state_dir else default_state_dir()
        self.state_file = self.state_dir / STATE_FILE
        self.key = self.state_dir / "ssh" / "id_ed25519"

    # ---- state ---------------------------------------------------------------------------------
    def _load(self) -> dict | None:
        try:
            return json.loads(self.state_file.read_text())
        except FileNotFoundError:
            return None
        except ValueError as exc:
            raise LabError(
                f"{self.state_file} is damaged ({exc}); remove it by hand after checking "
                "that no board runs (`ip netns`, `ps -ef | grep nspawn`)"
            ) from exc

    def _save(self, state: dict) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_name(STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(state, indent=2) + "\n")
        tmp.replace(self.state_file)

    @property
    def is_up(self) -> bool:
        state = self._load()
        return bool(state and state.get("phase") == "up")

    @property
    def nodes(self) -> list[net.Node]:
        state = self._load() or {}
        return [net.Node(**n) for n in state.get("nodes", [])]

    @property
    def boards(self) -> list[net.Node]:
        return [n for n in self.nodes if n.role == "board"]

    @property
    def arm64_boards(self) -> list[str]:
        """Names of the boards running the arm64 image (under qemu-user)."""
        state = self._load() or {}
        return arm64_board_names(self.nodes, state.get("arm64_boards", 0))

    @property
    def inventory_path(self) -> Path | None:
        state = self._load() or {}
        return Path(state["inventory"]) if state.get("inventory") else None

    def node(self, name: str) -> net.Node:
        for n in self.nodes:
            if n.name == name:
                return n
        known = ", ".join(n.name for n in self.nodes) or "none (is the lab up?)"
        raise LabError(f"no board named {name!r}; boards: {known}")

    def paths(self, name: str) -> boardmod.BoardPaths:
        return boardmod.BoardPaths(self.node(name), self.state_dir)

    def root(self, name: str) -> Path:
        """The board's root as seen from the host (its overlay mount)."""
        return self.paths(name).root

    # ---- up ------------------------------------------------------------------------------------
    @staticmethod
    def _monitoring_debs(image: Path, log: Log) -> str | None:
        """The controller folder of Prometheus .deb files for the scheduler host (lab.debs), or
        None (said in the log) when they cannot be fetched: the lab then has no monitoring group."""
        from npudure_workshop.lab import debs

        try:
            return str(debs.ensure(image / "var" / "lib" / "dpkg" / "status"))
        except debs.DebsError as exc:
            log(f"no monitoring on the lab: Prometheus' packages could not be fetched ({exc})")
            return None

    def _write_inventory(self, state: dict, nodes: list[net.Node], inventory: Path) -> None:
        arm64 = arm64_board_names(nodes, state.get("arm64_boards", 0))
        invmod.write(
            inventory,
            invmod.render(
                nodes,
                self.key,
                backend=state["backend"],
                arm64=arm64,
                sim_time_scale=state.get("time_scale", 1.0),
                monitoring_deb_dir=state.get("monitoring_debs"),
            ),
        )

    def up(
        self,
        boards: int = 3,
        scheduler_host: bool = True,
        backend: str = "sim",
        inventory: Path | None = None,
        timeout: float = BOARD_BOOT_TIMEOUT_S,
        log: Log = print,
        keep_on_failure: bool = False,
        arm64_boards: int = 0,
        time_scale: float | None = None,
        board_cpu: str = board_cpu_mod.HOST,
    ) -> list[net.Node]:
        """Build the image if needed, boot every machine, wait for sshd, write the inventory.

        The inventory carries the sim ``time_scale`` (default: what ``lab.timescale`` picks for
        this host and this many boards), so a plain ``site.yml`` deploys boards the host can keep up with.
        The last ``arm64_boards`` boards boot an arm64 Debian image under qemu-user (binfmt_misc).
        On failure everything made so far is removed again (boot logs are kept in
        ``<state_dir>/last-failure/``) unless `keep_on_failure`.
        """
        if not 0 <= arm64_boards <= boards:
            raise LabError(f"--arm64-boards must be between 0 and the number of boards ({boards})")
        if time_scale is not None and not time_scale > 0:
            raise LabError(f"--time-scale must be a positive number (got {time_scale:g})")
        if board_cpu not in board_cpu_mod.CHOICES:
            choices = ", ".join(board_cpu_mod.CHOICES)
            raise LabError(f"--board-cpu must be one of {choices} (got {board_cpu!r})")
        if time_scale is None:
            time_scale, why = timescale.pick(boards, os.cpu_count() or 1)
            log(f"emulated NPU {why}")
        preflight()
        with machine_lock(log):
            return self._up(
                boards,
                scheduler_host,
                backend,
                inventory,
                timeout,
                log,
                keep_on_failure,
                arm64_boards,
                time_scale,
                board_cpu,
            )

    def _up(
        self,
        boards: int,
        scheduler_host: bool,
        backend: str,
        inventory: Path | None,
        timeout: float,
        log: Log,
        keep_on_failure: bool,
        arm64_boards: int = 0,
        time_scale: float = 1.0,
        board_cpu: str = board_cpu_mod.HOST,
    ) -> list[net.Node]:
        nodes = net.plan_nodes(boards, scheduler_host)
        state = self._load()
        if state:
            same = (
                state.get("boards") == boards
                and state.get("scheduler_host") == scheduler_host
                and state.get("backend") == backend
                and state.get("arm64_boards", 0) == arm64_boards
            )
            if same and state.get("phase") == "up" and all(s.ssh_ok for s in self.status()):
                log(f"the lab is already up with {boards} boards; reusing it")
                # The settings a reuse may change: the time scale, and with it the boards' CPU budget.
                if state.get("time_scale") != time_scale or state.get("board_cpu", "host") != board_cpu:
                    state["time_scale"] = time_scale
                    state["board_cpu"] = board_cpu
                    self._write_inventory(state, self.nodes, Path(state["inventory"]))
                    self._save(state)
                    self._apply_board_cpu(state, log, lift=True)
                return self.nodes
            what = (
                f"a lab with {state.get('boards')} boards (scheduler host: {state.get('scheduler_host')}, "
                f"backend {state.get('backend')}) is"
                if state.get("phase") == "up"
                else "a half-started lab is"
            )
            raise LabError(
                f"{what} already in {self.state_dir}; run `npudure lab down{self._state_dir_arg()}` first"
            )
        self._refuse_foreign(nodes)
        inventory = Path(inventory) if inventory else invmod.default_path()
        state = {
            "format": STATE_FORMAT,
            "phase": "starting",
            "boards": boards,
            "scheduler_host": scheduler_host,
            "backend": backend,
            "arm64_boards": arm64_boards,
            "time_scale": time_scale,
            "board_cpu": board_cpu,
            "nodes": [n.__dict__ for n in nodes],
            "inventory": str(inventory.resolve()),
            "created_dirs": [],
            "nspawn_tmpfs": False,
            "bridge": False,
        }
        created = state["created_dirs"]
        for d in (
            *_missing_parents(self.state_dir),
            *_missing_parents(inventory.parent),
            *_missing_parents(net.NETNS_DIR),
            *_missing_parents(NSPAWN_RUN_DIR),
        ):
            if not Path(d).exists():
                created.append(str(d))
        for base in boardmod.cgroup_bases():
            if not base.exists():
                created.append(str(base))
        self._save(state)
        try:
            return self._bring_up(state, nodes, inventory, timeout, log)
        except (Exception, KeyboardInterrupt) as exc:
            if keep_on_failure:
                raise
            saved = self._save_failure_logs(nodes)
            log(f"lab up failed; removing what it made (boot logs kept in {saved})")
            try:
                self._down(log=lambda _m: None, timeout=STOP_TIMEOUT_S)
            except LabError as down_exc:
                log(f"clean-up after the failure was incomplete: {down_exc}")
            if isinstance(exc, KeyboardInterrupt):
                raise
            raise LabError(f"{exc} (boot logs: {saved})") from exc

    def _bring_up(
        self, state: dict, nodes: list[net.Node], inventory: Path, timeout: float, log: Log
    ) -> list[net.Node]:
        started = time.monotonic()
        image = imagemod.ensure_image(log=log)
        state["image"] = str(image)
        arm64 = set(arm64_board_names(nodes, state.get("arm64_boards", 0)))
        images = {n.name: image for n in nodes}
        if arm64:
            arm64_image = imagemod.ensure_image(log=log, arch="arm64")
            images |= dict.fromkeys(arm64, arm64_image)
            state["arm64_image"] = str(arm64_image)
        if state.get("scheduler_host"):
            state["monitoring_debs"] = self._monitoring_debs(image, log)
        self._save(state)
        pubkey = self._ensure_key()

        # /run is not a tmpfs here; nspawn refuses to clean its propagation folder on anything else.
        NSPAWN_RUN_DIR.mkdir(parents=True, exist_ok=True)
        if not is_mountpoint(NSPAWN_RUN_DIR):
            state["nspawn_tmpfs"] = True
            self._save(state)
            run(
                ["mount", "-t", "tmpfs", "-o", "mode=0755,size=16m", "npudure-lab", str(NSPAWN_RUN_DIR)],
                f"mounting a tmpfs on {NSPAWN_RUN_DIR}",
            )

        state["bridge"] = True
        self._save(state)
        net.create_bridge()
        for node in nodes:
            paths = boardmod.BoardPaths(node, self.state_dir)
            net.create_node_net(node)
            boardmod.make_cgroups(paths)
            boardmod.mount_overlay(paths, images[node.name])
            boardmod.personalize(paths, nodes, pubkey)
            boardmod.start_launcher(
                paths, boardmod.nspawn_cmd(node, paths.root, fake_proc=node.role == "board")
            )
        log(f"{len(nodes)} machines booting; waiting for sshd on each (up to {timeout:.0f} s)")
        self._wait_ssh(nodes, timeout)

        self._write_inventory(state, nodes, inventory)
        state["phase"] = "up"
        self._save(state)
        self._apply_board_cpu(state, log)
        log(
            f"lab up in {time.monotonic() - started:.1f} s: "
            + ", ".join(f"{n.name}={n.address}" for n in nodes)
            + f"; inventory: {inventory}"
        )
        return nodes

    def _save_failure_logs(self, nodes: Sequence[net.Node]) -> Path:
        dest = self.state_dir / "last-failure"
        dest.mkdir(parents=True, exist_ok=True)
        for node in nodes:
            paths = boardmod.BoardPaths(node, self.state_dir)
            for f in (paths.console_log, paths.launcher_log):
                if f.exists():
                    (dest / f"{node.name}-{f.name}").write_bytes(f.read_bytes()[-200_000:])
        return dest

    def _state_dir_arg(self) -> str:
        return "" if self.state_dir == default_state_dir() else f" --state-dir {self.state_dir}"

    def _refuse_foreign(self, nodes: Sequence[net.Node], bridge: bool = True) -> None:
        """Refuse when lab resources exist that this state dir did not record (another lab is up).
        ``bridge=False``: the lab is up and the bridge is its own (``add``)."""
        found = [net.BRIDGE] if bridge and net.link_exists(net.BRIDGE) else []
        found += [n.netns for n in nodes if net.netns_exists(n.netns)]
        found += [n.veth for n in nodes if net.link_exists(n.veth)]
        found += [
            str(cg) for n in nodes for cg in boardmod.BoardPaths(n, self.state_dir).cgroups() if cg.exists()
        ]
        if found:
            more = f" and {len(found) - 4} more" if len(found) > 4 else ""
            raise LabError(
                f"lab resources already exist that {self.state_file} does not record: "
                f"{', '.join(found[:4])}{more}. Another lab is probably up with a different --state-dir; "
                "run `npudure lab down --state-dir <that dir>`"
            )

    def _ensure_key(self) -> str:
        if not self.key.exists():
            self.key.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            ssh_keygen(self.key, "npudure-lab-controller", "generating the lab's SSH key")
        return self.key.with_suffix(".pub").read_text()

    def _wait_ssh(self, nodes: Sequence[net.Node], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        pending = list(nodes)
        while pending:
            for node in list(pending):
                paths = boardmod.BoardPaths(node, self.state_dir)
                if not boardmod.launcher_pid(paths):
                    raise LabError(
                        f"{node.name} stopped while booting; see {paths.console_log} and "
                        f"{paths.launcher_log}; clean up with `npudure lab down"
                        f"{self._state_dir_arg()}`"
                    )
                if _tcp_open(node.address, 22) and self._ssh_ok(node):
                    pending.remove(node)
            if pending and time.monotonic() > deadline:
                names = ", ".join(n.name for n in pending)
                logs = ", ".join(str(boardmod.BoardPaths(n, self.state_dir).console_log) for n in pending)
                raise LabError(
                    f"sshd did not answer within {timeout:.0f} s on {names}; see {logs}; "
                    f"clean up with `npudure lab down{self._state_dir_arg()}`"
                )
            if pending:
                time.sleep(0.3)

    def _ssh_ok(self, node: net.Node) -> bool:
        proc = subprocess.run(
            [*ssh_base(self.key, 3), f"root@{node.address}", "true"],
            capture_output=True,
            timeout=15,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        return proc.returncode == 0

    # ---- add / remove one board ----------------------------------------------------------------
    def add(self, log: Log = print, timeout: float = BOARD_BOOT_TIMEOUT_S) -> net.Node:
        """Boot one more board into the running lab (the next boardN, its address, systemd, sshd) and put
        it in the inventory's ``boards`` group; ``site.yml`` then installs it. ``down`` removes it too."""
        if os.geteuid() != 0:
            raise LabError("`npudure lab add` needs root: run it with sudo")
        with machine_lock(log):
            return self._add(log, timeout)

    def _running_state(self, action: str) -> dict:
        state = self._load()
        if not state or state.get("phase") != "up":
            raise LabError(
                f"no lab is up in {self.state_dir}: start one with `npudure lab up` before `lab {action}`"
            )
        return state

    def _add(self, log: Log, timeout: float) -> net.Node:
        state = self._running_state("add")
        if state.get("arm64_boards", 0):
            # The arm64 boards are the last N by name (arm64_board_names): a board added after them would
            # take one's place.
            raise LabError(
                "`lab add` boots amd64 boards; this lab has --arm64-boards, so boot it at its size"
            )
        nodes = [net.Node(**n) for n in state["nodes"]]
        node = net.next_board(nodes)
        self._refuse_foreign([node], bridge=False)
        grown = net.with_board(nodes, node)
        # Recorded before anything is made, so that `down` removes it whatever happens next.
        state["nodes"] = [n.__dict__ for n in grown]
        state["boards"] = len([n for n in grown if n.role == "board"])
        self._save(state)
        paths = boardmod.BoardPaths(node, self.state_dir)
        try:
            net.create_node_net(node)
            boardmod.make_cgroups(paths)
            boardmod.mount_overlay(paths, Path(state["image"]))
            boardmod.personalize(paths, grown, self._ensure_key())
            boardmod.start_launcher(paths, boardmod.nspawn_cmd(node, paths.root, fake_proc=True))
            log(f"{node.name} booting at {node.address}; waiting for sshd (up to {timeout:.0f} s)")
            self._wait_ssh([node], timeout)
        except (Exception, KeyboardInterrupt) as exc:
            saved = self._save_failure_logs([node])
            log(f"lab add failed; removing {node.name} again (boot logs kept in {saved})")
            try:
                self._remove_node(state, node)
            except LabError as clean:
                log(f"clean-up after the failure was incomplete: {clean} (`npudure lab down` removes it)")
            if isinstance(exc, KeyboardInterrupt):
                raise
            raise LabError(f"{node.name}: {exc} (boot logs: {saved})") from exc
        self._renew_hosts_files(grown)
        self._write_inventory(state, grown, Path(state["inventory"]))
        self._apply_board_cpu(state, log, [node.name])
        log(
            f"{node.name} up at {node.address}, in the inventory's boards group ({state['inventory']}); "
            f"install it with site.yml (docs/operations.md, Add a board)"
        )
        return node

    def remove(self, name: str, log: Log = print, timeout: float = STOP_TIMEOUT_S) -> None:
        """Stop one board, remove what was made for it, and take it out of the inventory (after
        ``playbooks/remove-board.yml`` took it out of the fleet)."""
        if os.geteuid() != 0:
            raise LabError("`npudure lab remove` needs root: run it with sudo")
        with machine_lock(log):
            state = self._running_state("remove")
            node = self.node(name)
            if node.role != "board":
                raise LabError(f"{name} is the scheduler host; `lab remove` takes boards (or `lab down` all)")
            if len(self.boards) == 1:
                raise LabError(f"{name} is the lab's last board; take the lab down with `npudure lab down`")
            self._remove_node(state, node, timeout)
            left = self.nodes
            self._renew_hosts_files(left)
            self._write_inventory(state, left, Path(state["inventory"]))
            log(f"{name} stopped and removed; the inventory lists {', '.join(n.name for n in self.boards)}")

    def _remove_node(self, state: dict, node: net.Node, timeout: float = STOP_TIMEOUT_S) -> None:
        """Stop and remove one machine, then drop it from the state (only once it is gone)."""
        paths = boardmod.BoardPaths(node, self.state_dir)
        if boardmod.launcher_pid(paths) or boardmod.nspawn_pid(paths):
            boardmod.stop_signal(paths)
        boardmod.stop(paths, timeout)
        boardmod.remove_dir(paths)
        net.remove_node_net(node)
        problems = boardmod.remove_cgroups(paths)
        if problems:
            raise LabError(f"{node.name}: could not remove: " + "; ".join(problems))
        state["nodes"] = [n for n in state["nodes"] if n["name"] != node.name]
        state["boards"] = len([n for n in state["nodes"] if n["role"] == "board"])
        self._save(state)

    def _renew_hosts_files(self, nodes: list[net.Node]) -> None:
        """Every running machine's /etc/hosts names the current set (lab up wrote them for its own)."""
        for node in nodes:
            hosts = boardmod.BoardPaths(node, self.state_dir).root / "etc" / "hosts"
            if hosts.parent.is_dir():
                hosts.write_text(boardmod.hosts_file(node, nodes))

    # ---- down ----------------------------------------------------------------------------------
    def down(self, log: Log = print, timeout: float = STOP_TIMEOUT_S) -> bool:
        """Stop every board and remove what `up` created. Returns False when there was nothing."""
        if os.geteuid() != 0:
            raise LabError("`npudure lab down` needs root: run it with sudo")
        with machine_lock(log):
            return self._down(log, timeout)

    def _down(self, log: Log, timeout: float) -> bool:
        state = self._load()
        if state is None:
            log(f"no lab recorded in {self.state_dir}: nothing to do")
            return False
        nodes = [net.Node(**n) for n in state.get("nodes", [])]
        all_paths = [boardmod.BoardPaths(n, self.state_dir) for n in nodes]
        # Power every board off at once, then wait: ~2.5 s in total instead of per board.
        for paths in all_paths:
            if boardmod.launcher_pid(paths) or boardmod.nspawn_pid(paths):
                boardmod.stop_signal(paths)
        for paths in all_paths:
            boardmod.stop(paths, timeout)
        problems: list[str] = []
        for paths in all_paths:
            boardmod.remove_dir(paths)
            net.remove_node_net(paths.node)
            problems += boardmod.remove_cgroups(paths)
        if state.get("bridge"):
            net.remove_bridge()
        if state.get("nspawn_tmpfs") and is_mountpoint(NSPAWN_RUN_DIR):
            run(["umount", str(NSPAWN_RUN_DIR)], f"unmounting the tmpfs on {NSPAWN_RUN_DIR}")
        inventory = Path(state["inventory"]) if state.get("inventory") else None
        if inventory and inventory.exists():
            inventory.unlink()
        for f in (self.key, self.key.with_suffix(".pub")):
            f.unlink(missing_ok=True)
        for d in (self.key.parent, self.state_dir / "nodes"):
            _rmdir_if_empty(d)
        self.state_file.unlink(missing_ok=True)
        # Folders that did not exist before `up`, deepest first, only when empty.
        for d in sorted(state.get("created_dirs", []), key=lambda p: len(Path(p).parts), reverse=True):
            path = Path(d)
            # `ip netns add` bind-mounts /run/netns onto itself the first time; undo that too.
            if path == net.NETNS_DIR and path.is_dir() and not any(path.iterdir()) and is_mountpoint(path):
                run(["umount", str(path)], f"unmounting {path}", check=False)
            _rmdir_if_empty(path)
        if problems:
            raise LabError("could not remove: " + "; ".join(problems))
        log(f"lab down: {len(nodes)} machines stopped and removed")
        return True

    # ---- using a running lab -------------------------------------------------------------------
    def exec(
        self,
        name: str,
        cmd: Sequence[str] | str,
        *,
        via: str = "nsenter",
        timeout: float = 60,
        check: bool = False,
        capture: bool = True,
    ) -> subprocess.CompletedProcess[str]:
        """Run `cmd` inside a board. ``via="nsenter"`` works with the board's link down; ``"ssh"`` goes
        over the lab network like Ansible does. A string runs under ``sh -c``."""
        argv = ["sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        node = self.node(name)
        if via == "ssh":
            full = [*ssh_base(self.key), f"root@{node.address}", "--", shlex.join(argv)]
        elif via == "nsenter":
            pid = boardmod.init_pid(self.paths(name))
            if not pid:
                raise LabError(f"{name} is not running (no systemd inside); see `npudure lab status`")
            full = [
                "nsenter",
                "-t",
                str(pid),
                "--all",
                "-r",
                "-w",
                "--",
                "env",
                "-i",
                f"PATH={SBIN_PATH}",
                "HOME=/root",
                "LANG=C.UTF-8",
                "TERM=dumb",
                *argv,
            ]
        else:
            raise LabError(f"exec via {via!r}: use 'nsenter' or 'ssh'")
        try:
            proc = subprocess.run(
                full,
                capture_output=capture,
                text=True,
                timeout=timeout,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise LabError(f"{name}: `{shlex.join(argv)}` did not finish within {timeout:.0f} s") from exc
        if check and proc.returncode != 0:
            raise LabError(
                f"{name}: `{shlex.join(argv)}` exited {proc.returncode}: "
                f"{(proc.stderr or proc.stdout or '').strip()[-500:]}"
            )
        return proc

    def boot_id(self, name: str) -> str | None:
        proc = self.exec(name, ["cat", "/proc/sys/kernel/random/boot_id"], timeout=10)
        return proc.stdout.strip() if proc.returncode == 0 else None

    def reboot(self, name: str, timeout: float = BOARD_BOOT_TIMEOUT_S) -> None:
        """Reboot a board from inside (``systemctl reboot``) and wait until sshd answers again."""
        node = self.node(name)
        paths = self.paths(name)
        before_pid = boardmod.nspawn_pid(paths)
        before_boot = self.boot_id(name)
        self.exec(name, ["systemctl", "reboot"], timeout=30)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            now = boardmod.nspawn_pid(paths)
            if now and now != before_pid and boardmod.init_pid(paths):
                break
            if not boardmod.launcher_pid(paths):
                raise LabError(f"{name} did not come back from the reboot; see {paths.launcher_log}")
            time.sleep(0.2)
        else:
            raise LabError(f"{name} did not restart within {timeout:.0f} s; see {paths.console_log}")
        self._wait_ssh([node], max(5.0, deadline - time.monotonic()))
        if before_boot and self.boot_id(name) == before_boot:
            raise LabError(f"{name}: boot_id unchanged after the reboot")

    def set_link(self, name: str, up: bool) -> None:
        net.set_link(self.node(name), up)

    def board_cpu_budget(self) -> float | None:
        """The boards' CPU quota from the lab's --board-cpu profile (host CPUs), None when uncapped."""
        state = self._load() or {}
        return board_cpu_mod.budget(state.get("board_cpu"), state.get("time_scale", 1.0))

    def _apply_board_cpu(
        self, state: dict, log: Log, names: Sequence[str] | None = None, lift: bool = False
    ) -> None:
        """Cap the boards at the --board-cpu budget; uncapped boards are left alone unless ``lift``
        (a reuse that turned the profile off)."""
        profile, scale = state.get("board_cpu"), state.get("time_scale", 1.0)
        cap = board_cpu_mod.budget(profile, scale)
        if cap is None and not lift:
            return
        for name in names if names is not None else [n.name for n in self.boards]:
            boardmod.set_cpu_quota(self.paths(name), cap)
        log(board_cpu_mod.describe(profile, scale))

    def set_cpu_quota(self, name: str, fraction: float | None) -> None:
        """Cap a board's CPU (a fault); None gives it back its budget (--board-cpu), not the whole host."""
        boardmod.set_cpu_quota(self.paths(name), self.board_cpu_budget() if fraction is None else fraction)

    def status(self) -> list[NodeStatus]:
        out = []
        for node in self.nodes:
            paths = boardmod.BoardPaths(node, self.state_dir)
            pid = boardmod.nspawn_pid(paths)
            systemd = "stopped"
            if pid and boardmod.init_pid(paths):
                try:
                    proc = self.exec(node.name, ["systemctl", "is-system-running"], timeout=10)
                    systemd = proc.stdout.strip() or "unknown"
                except LabError:
                    systemd = "unknown"
            ssh_ok = bool(pid) and _tcp_open(node.address, 22) and self._ssh_ok(node)
            out.append(NodeStatus(node.name, node.address, node.role, pid, systemd, ssh_ok))
        return out


def arm64_board_names(nodes: Sequence[net.Node], count: int) -> list[str]:
    """The last ``count`` boards are the arm64 ones (board3 of 3 with --arm64-boards 1)."""
    boards = [n.name for n in nodes if n.role == "board"]
    return boards[len(boards) - count :] if count else []


def _tcp_open(address: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return True
    except OSError:
        return False


def _missing_parents(path: Path) -> list[Path]:
    """`path` and its ancestors that do not exist yet, outermost first."""
    out = []
    p = path.resolve()
    while not p.exists():
        out.append(p)
        p = p.parent
    return list(reversed(out))


def _rmdir_if_empty(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.rmdir()
