"""big.LITTLE CPU affinity and NPU IRQ steering: the one place these rules live.

The agent pins its NPU submit threads with :func:`pin_current_thread`; ``npudure affinity plan``
tells Ansible what to put in the agent unit's ``CPUAffinity=``; ``npudure affinity apply`` steers
the NPU IRQs to the little cores. All of them read the same :func:`detect`.
"""

from npudure.affinity.cores import (
    CoreSplit,
    cpu_mask_hex,
    detect,
    format_cpu_list,
    parse_cpu_list,
    parse_cpu_mask_hex,
    pin_current_thread,
    read_capacities,
    split_big_little,
    usable,
)
from npudure.affinity.irq import IrqChange, Plan, apply_plan, make_plan

__all__ = [
    "CoreSplit",
    "IrqChange",
    "Plan",
    "apply_plan",
    "cpu_mask_hex",
    "detect",
    "format_cpu_list",
    "make_plan",
    "parse_cpu_list",
    "parse_cpu_mask_hex",
    "pin_current_thread",
    "read_capacities",
    "split_big_little",
    "usable",
]
