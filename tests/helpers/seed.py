"""The reference's own measurements (typed here from the seed write-up, not taken from the code's
tables), which the sim backend (tests/unit/backends/test_sim.py) and the round-robin queue model
(tests/unit/bench/test_sim_queue.py) are held against."""

# Seed: one RK3576 board, local inference, no network, 2 NPU cores.
SEED_LOCAL_INF_S = 161.5
# Seed: CPU cap on one board -> per-board latency spread (slowest / fastest mean), round robin, fan on.
SEED_RR_SPREAD = {2208: 1.12, 1608: 1.18, 1200: 1.33, 1008: 1.79, 816: 2.26, 600: 3.93}
# Seed: 3 boards, concurrency 8 per board -> 338.4 inf/s, so a request took 24 / 338.4 = 70.9 ms end
# to end, of which 12.4 ms on the NPU: ~58.5 ms outside it (transport, scheduler, network).
SEED_PATH_S = 24 / 338.4 - 2 / SEED_LOCAL_INF_S
TOLERANCE = 0.15
