"""The steal allowance of the tests that run the harness for its plumbing, not for its figures.

This shared 2-core CI VM's hypervisor steals 5-10% of its CPU under load (seen 2026-12-02), above the
harness's default limit (5%, ``npudure bench --max-steal``): every run of those tests would be invalid
(host_saturated) for a reason that is not theirs. They allow this much; the runs still record the
steal they saw and the limit they had. The rule itself: tests/unit/bench/test_emulation_lag.py.
"""

PLUMBING_MAX_STEAL = 0.3
