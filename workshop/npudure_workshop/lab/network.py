"""The lab's network: one bridge on the controller, one network namespace + veth per board.

Addresses are set from the host (not by the board's own network stack), which was the most robust
way here; the board sees an ``eth0`` that is already up with its address and a default route.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from npudure_workshop.lab.host import LabError, run

BRIDGE = "npudure-br0"
PREFIX = "10.231.0"
PREFIX_LEN = 24
HOST_ADDR = f"{PREFIX}.1"
SCHED_ADDR = f"{PREFIX}.10"
FIRST_BOARD_HOST = 11
MAX_BOARDS = 254 - FIRST_BOARD_HOST + 1
SCHED_NAME = "sched"
NETNS_DIR = Path("/run/netns")


@dataclass(frozen=True)
class Node:
    """One emulated machine: a board or the scheduler host."""

    name: str
    address: str
    role: str  # "board" | "scheduler"

    @property
    def netns(self) -> str:
        return f"npudure-{self.name}"

    @property
    def veth(self) -> str:
        # Host side of the pair; interface names are at most 15 characters.
        return f"nl-{self.name}"[:15]

    @property
    def veth_peer(self) -> str:
        # Temporary name of the board side until it is moved into the netns and renamed eth0.
        return f"np-{self.name}"[:15]


def board_address(index: int) -> str:
    """Address of board `index` (1-based): board1 -> .11, board2 -> .12, …"""
    if not 1 <= index <= MAX_BOARDS:
        raise LabError(f"board index {index} out of range: the lab has room for 1..{MAX_BOARDS} boards")
    return f"{PREFIX}.{FIRST_BOARD_HOST + index - 1}"


def plan_nodes(boards: int, scheduler_host: bool) -> list[Node]:
    if boards < 1 or boards > MAX_BOARDS:
        raise LabError(f"--boards must be between 1 and {MAX_BOARDS} (got {boards})")
    nodes = [Node(f"board{i}", board_address(i), "board") for i in range(1, boards + 1)]
    if scheduler_host:
        nodes.append(Node(SCHED_NAME, SCHED_ADDR, "scheduler"))
    return nodes


def board_index(node: Node) -> int:
    return int(node.name.removeprefix("board"))


def next_board(nodes: list[Node]) -> Node:
    """The board ``npudure lab add`` boots next: the lowest free boardN (its address follows from N)."""
    taken = {board_index(n) for n in nodes if n.role == "board"}
    index = next(i for i in range(1, MAX_BOARDS + 2) if i not in taken)
    return Node(f"board{index}", board_address(index), "board")  # board_address refuses a full lab


def with_board(nodes: list[Node], node: Node) -> list[Node]:
    """``nodes`` plus ``node``: boards in index order, then the scheduler host (the inventory's order)."""
    boards = sorted([n for n in nodes if n.role == "board"] + [node], key=board_index)
    return boards + [n for n in nodes if n.role != "board"]


def link_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()


def netns_exists(name: str) -> bool:
    return (NETNS_DIR / name).exists()


def create_bridge() -> None:
    run(["ip", "link", "add", BRIDGE, "type", "bridge"], f"creating bridge {BRIDGE}")
    run(["ip", "addr", "add", f"{HOST_ADDR}/{PREFIX_LEN}", "dev", BRIDGE], f"addressing bridge {BRIDGE}")
    run(["ip", "link", "set", BRIDGE, "up"], f"bringing bridge {BRIDGE} up")


def remove_bridge() -> None:
    if link_exists(BRIDGE):
        run(["ip", "link", "del", BRIDGE], f"removing bridge {BRIDGE}")


def create_node_net(node: Node) -> None:
    step = f"{node.name}: network"
    run(["ip", "netns", "add", node.netns], f"{step} (ip netns add {node.netns})")
    run(["ip", "link", "add", node.veth, "type", "veth", "peer", "name", node.veth_peer], f"{step} (veth)")
    run(["ip", "link", "set", node.veth_peer, "netns", node.netns], f"{step} (move veth into netns)")
    ns = ["ip", "-n", node.netns]
    run([*ns, "link", "set", node.veth_peer, "name", "eth0"], f"{step} (rename to eth0)")
    run([*ns, "addr", "add", f"{node.address}/{PREFIX_LEN}", "dev", "eth0"], f"{step} (address)")
    run([*ns, "link", "set", "lo", "up"], f"{step} (lo up)")
    run([*ns, "link", "set", "eth0", "up"], f"{step} (eth0 up)")
    run([*ns, "route", "add", "default", "via", HOST_ADDR], f"{step} (default route)")
    run(["ip", "link", "set", node.veth, "master", BRIDGE], f"{step} (attach to {BRIDGE})")
    run(["ip", "link", "set", node.veth, "up"], f"{step} (host side up)")


def remove_node_net(node: Node) -> None:
    # Deleting the namespace destroys its end of the pair and with it the host end.
    if netns_exists(node.netns):
        run(["ip", "netns", "del", node.netns], f"{node.name}: removing netns {node.netns}")
    if link_exists(node.veth):
        # The kernel may still be tearing the pair down after the netns went: recheck after a failure.
        proc = run(["ip", "link", "del", node.veth], f"{node.name}: removing veth {node.veth}", check=False)
        if proc.returncode != 0 and link_exists(node.veth):
            raise LabError(f"{node.name}: could not remove veth {node.veth}: {proc.stderr.strip()}")


def set_link(node: Node, up: bool) -> None:
    """Take the board's own eth0 down or up (a cable pull), from the host."""
    run(
        ["ip", "-n", node.netns, "link", "set", "eth0", "up" if up else "down"],
        f"{node.name}: ip link set eth0 {'up' if up else 'down'}",
    )
    if up:
        # Bringing a link down drops its routes; put the default route back.
        run(
            ["ip", "-n", node.netns, "route", "replace", "default", "via", HOST_ADDR],
            f"{node.name}: restoring the default route",
        )
