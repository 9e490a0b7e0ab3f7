"""Histogram buckets shared by the agent's and the scheduler's per-stage latency metrics.

Their own module (no numpy, no backends): the scheduler imports it, and every import is time a
restarting scheduler is away from its clients.
"""

from __future__ import annotations

STAGE_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
