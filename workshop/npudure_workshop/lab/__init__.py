"""The emulated fleet ("lab"): Rockchip boards as systemd-nspawn containers on one Linux machine.

Python API (needs root): ``Lab(state_dir).up(boards=3)``, ``.exec(board, cmd)``, ``.reboot(board)``,
``.set_link(board, up)``, ``.set_cpu_quota(board, fraction)``, ``.down()``. See docs/lab.md.
"""

from npudure_workshop.lab.host import LabError
from npudure_workshop.lab.lab import Lab, NodeStatus
from npudure_workshop.lab.network import Node

__all__ = ["Lab", "LabError", "Node", "NodeStatus"]
