"""The emulation knows when it falls behind, and the harness's host rules (no cluster: hand-built records)."""

from __future__ import annotations

import sys
import threading
from typing import Any

import numpy as np
import pytest
from prometheus_client import generate_latest

from npudure.agent.metrics import AgentMetrics
from npudure.backends.sim import SimBackend
from npudure.config import SimConfig
from npudure_workshop.bench import validity
from npudure_workshop.bench.cpu import HostCpu, host_others, host_window

FRAME = np.zeros((640, 640, 3), np.uint8)
WINDOW = (1.0, 5.0)


def _rows(model_per_s: float, actual_per_s: float, boot: str = "boot-a") -> list[dict[str, Any]]:
    """Telemetry rows as they come back from telemetry.csv (strings), one per second."""
    return [
        {
            "t_s": str(t),
            "board": "board1",
            "source": "node",
            "state": "UP",
            "boot_id": boot,
            "emulation_model_total_s": str(model_per_s * t),
            "emulation_actual_total_s": str(actual_per_s * t),
            "node_served_total": str(int(100 * t)),
        }
        for t in (0.0, 1.5, 2.5, 3.5, 4.5, 5.5)
    ]


def test_sim_counts_modelled_and_achieved_service() -> None:
    backend = SimBackend(1, SimConfig(time_scale=0.5, jitter_cv=0))
    assert backend.emulation_totals() == (0.0, 0.0)
    for _ in range(3):
        backend.contexts[0].run(FRAME)
    model, actual = backend.emulation_totals() or (0.0, 0.0)
    # The NPU phases are exact (jitter_cv 0); the CPU phase keeps the model's own spread.
    assert model == pytest.approx(3 * backend.mean_service_s(), rel=0.3)
    assert actual >= model  # a sleep never returns early


def test_sim_falls_behind_when_it_cannot_get_the_gil_back() -> None:
    """A busy Python thread holding the GIL (a host too busy for its boards) delays every wake-up."""
    backend = SimBackend(1, SimConfig(time_scale=0.1, jitter_cv=0))  # 1.2 ms per frame
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            pass

    old = sys.getswitchinterval()
    sys.setswitchinterval(0.02)  # the spinner keeps the GIL up to 20 ms per turn
    spinner = threading.Thread(target=spin)
    spinner.start()
    try:
        for _ in range(5):
            backend.contexts[0].run(FRAME)
    finally:
        stop.set()
        spinner.join()
        sys.setswitchinterval(old)
    model, actual = backend.emulation_totals() or (1.0, 1.0)
    assert actual / model - 1 > validity.MAX_EMULATION_LAG


def test_real_backends_report_no_emulation() -> None:
    assert AgentMetrics(None).registry is not None
    text = generate_latest(AgentMetrics(lambda: None).registry).decode()
    assert "emulation" not in text


def test_agent_metrics_export_the_counters() -> None:
    text = generate_latest(AgentMetrics(lambda: (2.5, 3.0)).registry).decode()
    assert "npudure_agent_emulation_model_seconds_total 2.5" in text
    assert "npudure_agent_emulation_actual_seconds_total 3.0" in text


def test_lag_is_computed_over_the_window_only() -> None:
    rows = _rows(1.0, 1.2)
    rows[-1]["emulation_actual_total_s"] = "999"  # outside the window: ignored
    lags = validity.emulation_lag_by_board(rows, ["board1"], WINDOW)
    assert lags["board1"] == pytest.approx(0.2)


@pytest.mark.parametrize(
    ("actual_per_s", "invalid"), [(1.01, False), (1.04, False), (1.10, True), (1.5, True)]
)
def test_emulation_lag_rule(actual_per_s: float, invalid: bool) -> None:
    reasons, _ = validity._emulation_lag(_rows(1.0, actual_per_s), ["board1"], WINDOW)
    assert bool(reasons) == invalid
    if invalid:
        assert reasons[0].startswith("emulation_lag: the emulated boards fell behind their model by")
        assert "raise --time-scale or use fewer boards" in reasons[0]


def test_lag_not_judged_across_a_reboot_or_without_service() -> None:
    rows = _rows(1.0, 2.0)
    for r in rows[3:]:
        r["boot_id"] = "boot-b"
    assert validity.emulation_lag_by_board(rows, ["board1"], WINDOW) == {"board1": None}
    idle = _rows(0.01, 0.05)
    for r in idle:
        r["node_served_total"] = "7"
    reasons, warnings = validity._emulation_lag(idle, ["board1"], WINDOW)
    assert reasons == [] and "not judged for board1" in warnings[0]


def test_real_boards_have_no_lag_figure() -> None:
    rows = [{k: v for k, v in r.items() if not k.startswith("emulation")} for r in _rows(1, 1)]
    assert validity.emulation_lag_by_board(rows, ["board1"], WINDOW) == {}


def test_host_window_fractions() -> None:
    before, after = HostCpu(100.0, 1000.0, 1.0), HostCpu(298.0, 1200.0, 11.0)
    got = host_window(before, after, shared=True)
    assert got is not None
    assert got["idle_fraction"] == pytest.approx(0.01)
    assert got["steal_fraction"] == pytest.approx(0.05)
    assert got["steal_limit"] == validity.HOST_MAX_STEAL_FRACTION
    assert host_window(before, after, shared=True, max_steal=0.3)["steal_limit"] == 0.3  # type: ignore[index]
    assert host_window(after, before, shared=True) is None
    assert host_window(None, after, shared=True) is None


def test_host_saturated_only_when_the_host_is_shared() -> None:
    busy = {"idle_fraction": 0.01, "steal_fraction": 0.0, "cpu_count": 2, "shared_with_cluster": True}
    reason = validity._host_saturated(busy)
    assert reason and reason.startswith("host_saturated:") and "1.0% idle" in reason
    assert validity._host_saturated({**busy, "shared_with_cluster": False}) is None
    assert validity._host_saturated({**busy, "idle_fraction": 0.5}) is None
    stolen = validity._host_saturated({**busy, "idle_fraction": 0.5, "steal_fraction": 0.2})
    assert stolen and "stole 20.0%" in stolen and "limit 5%, --max-steal" in stolen
    # A run allowed more (--max-steal 30, recorded with it) is judged by its own limit.
    assert (
        validity._host_saturated({**busy, "idle_fraction": 0.5, "steal_fraction": 0.2, "steal_limit": 0.3})
        is None
    )
    assert validity._host_saturated(None) is None


def test_status_prints_the_lag_of_an_emulated_board(capsys: pytest.CaptureFixture[str]) -> None:
    from npudure.client.status import _print_node
    from npudure.proto import inference_pb2 as pb

    late = pb.NodeStatus(node="b1", emulated=True, emulation_model_s_total=10, emulation_actual_s_total=12)
    _print_node(late)
    assert "lag +20.0%" in capsys.readouterr().out
    _print_node(pb.NodeStatus(node="b1"))  # a real board: no emulation line
    assert "emulation" not in capsys.readouterr().out


def test_host_others_takes_out_own_cpu_and_steal() -> None:
    # 200 s of host time: 98 busy, of which 10 stolen and 40 ours: 48 s by others.
    before, after = HostCpu(100.0, 1000.0, 1.0), HostCpu(198.0, 1200.0, 11.0)
    got = host_others(before, after, own_s=40.0)
    assert got == pytest.approx({"others_fraction": 48 / 200, "steal_fraction": 10 / 200})
    # Our own meters can run a tick ahead of /proc/stat: never a negative share.
    assert host_others(before, after, own_s=95.0)["others_fraction"] == 0.0  # type: ignore[index]
    assert host_others(after, before, own_s=0.0) is None
    assert host_others(None, after, own_s=0.0) is None
