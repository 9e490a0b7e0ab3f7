"""The fault suite and the soak on the emulated fleet (``npudure faults run|soak``, root).

The appliance (``playbooks/site.yml``) is provisioned onto the lab's systemd-nspawn boards, the
harness's closed-loop load generator drives the real scheduler, and each fault is injected while the
load runs: what a client saw (failed requests, error codes), how fast the scheduler took the board out
and put it back, and what the fault cost in throughput. See docs/faults.md.
"""
