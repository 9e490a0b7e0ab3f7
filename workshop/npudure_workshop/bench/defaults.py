"""Default parameters of the experiments, in one light module (the CLI imports it before anything heavy)."""

from __future__ import annotations

# The reference's CPU-cap ladder for the heterogeneity dial, MHz; --quick uses two rungs of it.
REFERENCE_LADDER_MHZ = (2208, 1608, 1200, 1008, 816, 600)
QUICK_LADDER_MHZ = (1200, 600)
# The clock the reference capped one board to for its heterogeneous-shelf runs (2.26× slower on sim).
CAPACITY_CAP_MHZ = 816
# The policies the capacity experiment compares (names from npudure.scheduler.policies.POLICIES).
CAPACITY_POLICIES = ("round_robin", "least_inflight", "p2c", "ect")
