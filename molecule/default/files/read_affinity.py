"""Read back, inside an emulated board, what the units did: independent of npudure's own code.

Prints JSON: the fake hardware (big/little from cpu_capacity, CPUs that really exist), the agent
unit's CPUAffinity (systemctl show), the running agent's Cpus_allowed_list, and the smp_affinity of
every NPU IRQ found in the interrupt table. Usage: read_affinity.py SYSFS_ROOT PROC_ROOT
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path


def cpu_list(text: str) -> list[int]:
    cpus: set[int] = set()
    for part in text.replace(" ", ",").split(","):
        if part:
            low, _, high = part.partition("-")
            cpus.update(range(int(low), int(high or low) + 1))
    return sorted(cpus)


def show(prop: str) -> str:
    argv = ["systemctl", "show", "--property", prop, "--value", "npudure-agent.service"]
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip()


def main(sysfs: str, proc: str) -> None:
    capacities = {
        int(m.group(1)): int(p.read_text())
        for p in Path(sysfs, "devices/system/cpu").glob("cpu*/cpu_capacity")
        if (m := re.search(r"cpu(\d+)/cpu_capacity$", str(p)))
    }
    top = max(capacities.values())
    pid = show("MainPID")
    status = Path(f"/proc/{pid}/status").read_text()
    allowed = re.search(r"^Cpus_allowed_list:\s*(\S+)", status, re.M)
    irqs = {}
    for line in Path(proc, "interrupts").read_text().splitlines():
        head, _, rest = line.partition(":")
        if head.strip().isdigit() and re.search(r"\.npu\b", rest):
            mask = Path(proc, "irq", head.strip(), "smp_affinity").read_text().strip()
            irqs[head.strip()] = int(mask.replace(",", ""), 16)
    print(
        json.dumps(
            {
                "big": sorted(c for c, cap in capacities.items() if cap == top),
                "little": sorted(c for c, cap in capacities.items() if cap != top),
                "little_mask": sum(1 << c for c, cap in capacities.items() if cap != top),
                "online": cpu_list(Path("/sys/devices/system/cpu/online").read_text()),
                "unit_cpu_affinity": cpu_list(show("CPUAffinity")),
                "process_cpus": cpu_list(allowed.group(1)) if allowed else [],
                "npu_irq_masks": irqs,
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
