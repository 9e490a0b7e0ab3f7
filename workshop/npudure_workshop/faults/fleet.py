"""The provisioned emulated fleet: the lab, the appliance (site.yml) on it, and the admin calls the
fault suite needs (cluster status, CPU cap, fault injection on a board's agent)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import grpc

from npudure.proto import contract
from npudure.proto import inference_pb2 as pb
from npudure.proto import inference_pb2_grpc as rpc
from npudure.security import access as security
from npudure_workshop import REPO

ROOT = REPO
SITE = ROOT / "playbooks" / "site.yml"
BIN = Path(sys.executable).parent
SCHEDULER_HOST = "sched"
SCHEDULER_PORT = 50050
ADMIN_TIMEOUT_S = 5.0
PROVISION_TIMEOUT_S = 1800.0
# What the suite deploys on top of the roles' defaults (ansible-playbook -e), and why:
DEFAULT_OVERRIDES: dict[str, object] = {
    # ~16 inf/s per emulated board: the 2-CPU host running every board, the scheduler and the load
    # generator must not itself be the bottleneck, or timings measure the host.
    "npudure_agent_sim_time_scale": 10.0,
    # A hung NPU worker makes the agent report NOT_SERVING after 1 s (role default 10 s): the scheduler
    # then takes the board out by health, not only by its board_timeout_s (2 s) on each request.
    "npudure_agent_hang_timeout_s": 1.0,
    # Every board in one batch: converging the lab before a measurement need not roll one board at a
    # time (3x slower on this host); the operator scenarios that measure a roll set 1.
    "npudure_serial": "100%",
}
# Same reconnect backoff as the scheduler's own board channels: a restarted peer is found in < 2 s
# instead of gRPC's default 1-120 s client backoff, so recovery times measure the cluster.
RECONNECT_OPTIONS = contract.reconnect_options()

Log = Callable[[str], None]


class FaultsError(Exception):
    """The suite cannot run or a step failed; the message says what and how to fix it."""


def unavailable_reason() -> str | None:
    """Why the emulated fleet cannot run here (None when it can)."""
    if os.geteuid() != 0:
        return "needs root (the emulated boards are systemd-nspawn containers): run it with sudo"
    if not (BIN / "ansible-playbook").exists():
        return f"ansible-playbook is not in {BIN}: pip install -e '.[dev]' into this virtualenv"
    if not SITE.is_file():
        return f"{SITE} is missing: run from a checkout of the npudure repository (pip install -e .)"
    try:
        from npudure_workshop.lab.host import missing_packages
    except ImportError as exc:
        return f"the lab is not importable: {exc}"
    missing = missing_packages()
    return f"missing Debian packages: apt-get install -y {' '.join(missing)}" if missing else None


def ensure_lab(boards: int, log: Log = print):
    """The running lab when it matches (``boards`` boards, a scheduler host, sim backend), else a new one.
    Returns (lab, owned): owned means this call booted it."""
    from npudure_workshop.lab import Lab, LabError, network

    lab = Lab()
    if lab.is_up:
        state = json.loads(lab.state_file.read_text())
        have = (state.get("boards"), state.get("scheduler_host"), state.get("backend"))
        if have != (boards, True, "sim"):
            raise FaultsError(
                f"a lab is already up with {have[0]} boards (scheduler host: {have[1]}, backend {have[2]}); "
                f"the suite needs {boards} sim boards and the scheduler host. Pass --boards {have[0]} or run "
                "`npudure lab down` first"
            )
        bad = [s.name for s in lab.status() if not s.ssh_ok]
        if bad:
            raise FaultsError(
                f"the running lab has machines that do not answer SSH: {', '.join(bad)}. "
                "Run `npudure lab down` and start again"
            )
        log(f"reusing the running lab ({boards} boards + {SCHEDULER_HOST})")
        return lab, False
    if network.link_exists(network.BRIDGE):
        raise FaultsError(
            f"another lab is up ({network.BRIDGE} exists) that {lab.state_dir} does not record; "
            "run `npudure lab down --state-dir <its state dir>` first"
        )
    try:
        lab.up(boards=boards, scheduler_host=True, backend="sim", log=log)
    except LabError as exc:
        raise FaultsError(f"cannot bring the emulated fleet up: {exc}") from exc
    return lab, True


# What the wheelhouse builds its two wheels from: the runtime (npudure/) and the workshop (workshop/).
# What the wheelhouse reads: the project files, the fleet's lock (its dependencies), the two packages.
SOURCE_FILES = ("pyproject.toml", "README.md", "LICENSE", "requirements/fleet.lock")
SOURCE_DIRS = ("npudure", "workshop")


def frozen_source(dest: Path) -> Path:
    """A copy of the package sources for the wheelhouse, so an edit elsewhere during the run does not
    change what is deployed (the appliance tests' `source` fixture uses it too)."""
    for name in SOURCE_FILES:
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "build", "*.egg-info")
    for name in SOURCE_DIRS:
        shutil.copytree(ROOT / name, dest / name, ignore=ignore)
    return dest


def ansible_env(**extra: str) -> dict[str, str]:
    """The environment ansible-playbook runs in: this venv's bin first on PATH, the repo's ansible.cfg,
    no colour; ``extra`` adds to (or overrides) it."""
    return {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_NOCOLOR": "1",
        **extra,
    }


def provision(
    inventory: Path,
    overrides: dict[str, object],
    log: Log = print,
    log_file: Path | None = None,
    timeout: float = PROVISION_TIMEOUT_S,
) -> float:
    """Run playbooks/site.yml against the lab with ``overrides``; returns the seconds it took."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="npudure-faults-src-") as tmp:
        extra = {**overrides, "npudure_wheelhouse_project_dir": str(frozen_source(Path(tmp)))}
        argv = [str(BIN / "ansible-playbook"), "-i", str(inventory), "-e", json.dumps(extra), str(SITE)]
        log(f"provisioning with playbooks/site.yml (-e {json.dumps(overrides)})")
        proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=ansible_env(ANSIBLE_FORCE_COLOR="0", NO_COLOR="1"),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        timed_out = threading.Event()

        def kill() -> None:
            timed_out.set()
            proc.kill()

        killer = threading.Timer(timeout, kill)
        killer.start()
        lines: list[str] = []
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line)
                if line.startswith("PLAY [") or "PLAY RECAP" in line:
                    log("  " + line.strip(" *\n"))
            rc = proc.wait()
        finally:
            killer.cancel()
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
    output = "".join(lines)
    if log_file:
        log_file.write_text(output)
    if rc != 0:
        why = f"was stopped after {timeout:.0f} s" if timed_out.is_set() else f"exited {rc}"
        raise FaultsError(
            f"playbooks/site.yml {why}; the last lines:\n{''.join(lines[-40:])}\n"
            "Fix what it names (or run `npudure lab down` and try again)"
        )
    return time.monotonic() - started


def read_agent_config(lab, board: str) -> dict:
    import yaml

    path = lab.root(board) / "etc" / "npudure" / "agent.yml"
    try:
        return yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return {}


def fleet_token(inventory: Path | None) -> Path | None:
    """The fleet's admin token the roles keep beside the inventory (npudure_secrets_dir's default)."""
    path = inventory.parent / "secrets" / "admin-token" if inventory else None
    return path if path and path.is_file() else None


def use_fleet_token(inventory: Path | None) -> None:
    """This process's admin calls (drain, faults, caps) carry the fleet's token unless one is set."""
    token = fleet_token(inventory)
    if token and not os.environ.get(security.ENV_TOKEN):
        os.environ[security.ENV_TOKEN] = str(token)


class Fleet:
    """The provisioned lab seen through its scheduler (all traffic stays on the lab's own addresses)."""

    def __init__(self, lab, owned: bool = False) -> None:
        self.lab = lab
        self.owned = owned
        self.scheduler = f"{lab.node(SCHEDULER_HOST).address}:{SCHEDULER_PORT}"
        self.boards = [b.name for b in lab.boards]
        use_fleet_token(lab.inventory_path)
        self._channel = security.channel(self.scheduler, RECONNECT_OPTIONS)
        self.cluster = rpc.ClusterStub(self._channel)
        self._addresses: dict[str, str] = {}

    def close(self) -> None:
        self._channel.close()

    def status(self, timeout: float = ADMIN_TIMEOUT_S) -> pb.ClusterStatus:
        status = self.cluster.GetClusterStatus(pb.ClusterStatusRequest(), timeout=timeout)
        for b in status.boards:
            self._addresses[b.name] = b.address
        return status

    def board_address(self, board: str) -> str:
        if board not in self._addresses:
            self.status()
        return self._addresses[board]

    def wait_all_up(self, timeout: float) -> tuple[bool, str]:
        """(True, "") once the scheduler reports every board UP, else (False, the last states seen)."""
        deadline = time.monotonic() + timeout
        last = "scheduler not reached"
        while True:
            try:
                status = self.status(timeout=2.0)
                states = {
                    b.name: pb.BoardState.Name(b.state).removeprefix("BOARD_STATE_") for b in status.boards
                }
                last = ", ".join(f"{k}={v}" for k, v in states.items()) or "no boards"
                if states and set(states) >= set(self.boards) and set(states.values()) == {"UP"}:
                    return True, ""
            except grpc.RpcError as exc:
                last = f"scheduler: {exc.code().name}"
            if time.monotonic() > deadline:
                return False, last
            time.sleep(0.3)

    def set_cpu_cap(self, board: str, mhz: int) -> None:
        self.cluster.SetNodeCpuCap(pb.SetNodeCpuCapRequest(node=board, mhz=mhz), timeout=ADMIN_TIMEOUT_S)

    def inject(self, board: str, fault: pb.Fault) -> pb.NodeStatus:
        """Node.InjectFault on the board's own agent (emulated boards only)."""
        with security.channel(self.board_address(board)) as channel:
            return rpc.NodeStub(channel).InjectFault(
                pb.InjectFaultRequest(fault=fault), timeout=ADMIN_TIMEOUT_S
            )
