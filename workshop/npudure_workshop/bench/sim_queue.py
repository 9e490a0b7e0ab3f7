"""What per-board latency spread would the sim model show under round robin at a given operating point?

A small discrete-event model of a closed-loop benchmark: ``concurrency`` requests circulate; each spends
a non-NPU path delay (transport, scheduler, network: exponential with mean ``path_s``), is handed to a
board in strict rotation, waits for one of the board's ``slots`` and is served for the sim's service
time (× the capped board's factor, lognormal jitter). It answers the question in docs/sim-model.md —
why the reference's round-robin spread ladder cannot be used as a pure service-time factor — in
milliseconds of CPU, deterministically (seeded), without sleeping.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque

# Sim v1's single-phase service per slot (2 cores / 161.5 inf/s): the replay of the cap ladder predates
# sim v2's phases and is kept as it was measured against the seed (docs/sim-model.md).
V1_SERVICE_S = 2 / 161.5


def round_robin_spread(
    factor: float,
    path_s: float,
    concurrency: int = 24,
    boards: int = 3,
    slots: int = 2,
    service_s: float = V1_SERVICE_S,
    jitter_cv: float = 0.03,
    requests: int = 20000,
    seed: int = 1,
) -> float:
    """Slowest / fastest mean end-to-end latency per board, the last board's service × ``factor``.
    The first fifth of the requests is discarded as warm-up."""
    rng = random.Random(seed)
    sigma = math.sqrt(math.log1p(jitter_cv * jitter_cv))
    service = [service_s] * (boards - 1) + [service_s * factor]
    free = [slots] * boards
    waiting: list[deque[float]] = [deque() for _ in range(boards)]
    events: list[tuple[float, int, int, float]] = []  # (time, 0 = arrives at board / 1 = done, board, sent)
    latencies: list[list[float]] = [[] for _ in range(boards)]
    turn = 0

    def send(now: float) -> None:
        nonlocal turn
        board, turn = turn % boards, turn + 1
        delay = rng.expovariate(1 / path_s) if path_s > 0 else 0.0
        heapq.heappush(events, (now + delay, 0, board, now))

    def serve(now: float, board: int, sent: float) -> None:
        jitter = rng.lognormvariate(-sigma * sigma / 2, sigma) if sigma else 1.0
        heapq.heappush(events, (now + service[board] * jitter, 1, board, sent))

    for _ in range(concurrency):
        send(0.0)
    done = 0
    while done < requests:
        now, kind, board, sent = heapq.heappop(events)
        if kind == 0:
            if free[board]:
                free[board] -= 1
                serve(now, board, sent)
            else:
                waiting[board].append(sent)
            continue
        done += 1
        if done > requests // 5:
            latencies[board].append(now - sent)
        if waiting[board]:
            serve(now, board, waiting[board].popleft())
        else:
            free[board] += 1
        send(now)
    means = [sum(lat) / len(lat) for lat in latencies if lat]
    return max(means) / min(means)
