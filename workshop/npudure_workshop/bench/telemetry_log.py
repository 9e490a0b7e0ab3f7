"""Board telemetry sampled every second WHILE the load runs, on its own thread.

The reference's harness read temperatures after each run: an RK3576 sheds heat in seconds once load
stops, so its column ``max_soc_c`` read 5 °C low and was not a maximum, and a wrong explanation ("it
wasn't hot enough") was built on it. Here a background thread polls each board's own Node.GetStatus
(fresh) — falling back to the scheduler's cached copy, marked as such with its age — every second
from before the first request until after the last response, and summaries use only samples taken
inside the measurement window. A sensor the board does not report stays empty, never 0.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from npudure.proto import inference_pb2 as pb
from npudure_workshop.bench.cluster import ClusterAdmin, state_name

INTERVAL_S = 1.0
BASE_COLUMNS: tuple[str, ...] = (
    "run_id",
    "t_s",  # seconds since the run's start, on the harness clock (same clock as the samples)
    "wall_unix_s",
    "board",
    "source",  # node (asked the board itself) | scheduler_cache (the scheduler's last poll) | none
    "status_age_s",  # age of a scheduler_cache sample; 0 for node
    "state",  # the scheduler's view: UP, DOWN, DRAINING, HOT, INACTIVE
    "scheduler_in_flight",
    "scheduler_served_total",  # the scheduler's count for this board
    "cluster_served_total",  # the scheduler's count for all boards
    "node_served_total",
    "boot_id",
    "cpu_cap_mhz",  # 0 = no cap
    "process_cpu_user_s",
    "process_cpu_system_s",
    # Emulated boards: cumulative modelled / achieved NPU service seconds (the emulation_lag rule).
    "emulation_model_total_s",
    "emulation_actual_total_s",
)
_UNITS = {"c": "c", "°c": "c", "mhz": "mhz", "%": "pct", "pct": "pct", "mv": "mv", "v": "v", "hz": "hz"}


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_") or "x"


def reading_columns(telemetry: pb.Telemetry) -> dict[str, float | None]:
    """Wide columns with the unit in the name: thermal_<zone>_c, cpu_freq_<policy>_mhz, npu_<name>_<unit>."""
    out: dict[str, float | None] = {}
    for r in telemetry.thermal_c:
        out[f"thermal_{_slug(r.name)}_c"] = r.value if r.HasField("value") else None
    for r in telemetry.cpu_freq_mhz:
        out[f"cpu_freq_{_slug(r.name)}_mhz"] = r.value if r.HasField("value") else None
    for r in telemetry.npu:
        unit = _UNITS.get(r.unit.lower(), _slug(r.unit) if r.unit else "value")
        out[f"npu_{_slug(r.name)}_{unit}"] = r.value if r.HasField("value") else None
    return out


def status_row(
    board: pb.BoardStatus, node: pb.NodeStatus | None, cluster_served: int, t_s: float, run_id: str
) -> dict[str, object]:
    row: dict[str, object] = {
        "run_id": run_id,
        "t_s": round(t_s, 4),
        "wall_unix_s": round(time.time(), 3),
        "board": board.name,
        "state": state_name(board.state),
        "scheduler_in_flight": board.in_flight,
        "scheduler_served_total": board.served_total,
        "cluster_served_total": cluster_served,
    }
    if node is not None:
        row.update(source="node", status_age_s=0.0)
    elif board.HasField("last_status"):
        node = board.last_status
        row.update(source="scheduler_cache", status_age_s=round(board.last_status_age_s, 3))
    else:
        row.update(source="none", status_age_s=None)
    if node is not None:
        row.update(
            node_served_total=node.served_total,
            boot_id=node.boot_id,
            cpu_cap_mhz=node.cpu_cap_mhz,
            process_cpu_user_s=node.telemetry.process_cpu_user_s,
            process_cpu_system_s=node.telemetry.process_cpu_system_s,
        )
        if node.emulated:
            row.update(
                emulation_model_total_s=node.emulation_model_s_total,
                emulation_actual_total_s=node.emulation_actual_s_total,
            )
        row.update(reading_columns(node.telemetry))
    return row


class TelemetrySampler:
    """Poll every board once a second on a background thread until ``stop()``."""

    def __init__(
        self, admin: ClusterAdmin, run_id: str, t0: float, interval_s: float = INTERVAL_S, direct: bool = True
    ) -> None:
        self.admin = admin
        self.run_id = run_id
        self.t0 = t0
        self.interval_s = interval_s
        self.direct = direct
        self.rows: list[dict[str, object]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="bench-telemetry", daemon=True)
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="bench-telemetry-node")

    def start(self) -> TelemetrySampler:
        self._thread.start()
        return self

    def stop(self) -> list[dict[str, object]]:
        self._stop.set()
        self._thread.join(timeout=10)
        self._pool.shutdown(wait=True)
        return self.rows

    def sample_once(self) -> list[dict[str, object]]:
        t_s = time.perf_counter() - self.t0
        try:
            status = self.admin.status(timeout_s=min(2.0, max(0.5, self.interval_s)))
        except Exception as exc:  # the scheduler may be briefly unreachable; keep sampling
            self.errors.append(f"t={t_s:.1f}s: {exc}")
            return []
        nodes: list[pb.NodeStatus | None] = [None] * len(status.boards)
        if self.direct:
            timeout = min(1.0, 0.8 * self.interval_s)
            futures = [self._pool.submit(self.admin.node_status, b.address, timeout) for b in status.boards]
            nodes = [f.result() for f in futures]
        rows = [
            status_row(b, n, status.served_total, t_s, self.run_id)
            for b, n in zip(status.boards, nodes, strict=True)
        ]
        self.rows.extend(rows)
        return rows

    def _loop(self) -> None:
        tick = 0
        while not self._stop.is_set():
            self.sample_once()
            tick += 1
            # Keep to the 1 s grid even when a sample took a while.
            delay = self.t0 + tick * self.interval_s - time.perf_counter()
            if delay < 0:
                tick += int(-delay // self.interval_s) + 1
                delay = self.t0 + tick * self.interval_s - time.perf_counter()
            if self._stop.wait(max(0.0, delay)):
                break


def columns(rows: Iterable[dict[str, object]]) -> list[str]:
    """BASE_COLUMNS then every reading column seen, sorted."""
    extra = sorted({k for r in rows for k in r} - set(BASE_COLUMNS))
    return [*BASE_COLUMNS, *extra]


def _num(value: object) -> float:
    """A reading as a float: rows hold numbers, or strings when read back from the CSV."""
    if isinstance(value, (int, float, str)):
        return float(value)
    raise ValueError(f"not a number: {value!r}")


def _floats(rows: list[dict[str, object]], key: str) -> np.ndarray:
    vals = [r.get(key) for r in rows]
    return np.array([_num(v) for v in vals if v is not None and v != ""], dtype=np.float64)


def summarize_board(rows: list[dict[str, object]], window: tuple[float, float]) -> dict[str, object]:
    """One board's telemetry inside the measurement window (samples of that board, in time order)."""
    start, end = window
    inside = [r for r in rows if start <= _num(r["t_s"]) <= end]
    out: dict[str, object] = {"telemetry_samples_during_load": len(inside)}
    keys = sorted({k for r in inside for k in r})
    thermal = [k for k in keys if k.startswith("thermal_")]
    freqs = [k for k in keys if k.startswith("cpu_freq_")]
    temps = [_floats(inside, k) for k in thermal]
    all_temps = np.concatenate(temps) if temps else np.empty(0)
    out["max_temp_during_load_c"] = float(all_temps.max()) if all_temps.size else None
    out["max_temp_by_zone_during_load_c"] = {
        k.removeprefix("thermal_").removesuffix("_c"): float(v.max())
        for k, v in zip(thermal, temps, strict=True)
        if v.size
    }
    freq_vals = [_floats(inside, k) for k in freqs]
    all_freqs = np.concatenate(freq_vals) if freq_vals else np.empty(0)
    out["min_cpu_freq_during_load_mhz"] = float(all_freqs.min()) if all_freqs.size else None
    out["median_cpu_freq_by_policy_during_load_mhz"] = {
        k.removeprefix("cpu_freq_").removesuffix("_mhz"): float(np.median(v))
        for k, v in zip(freqs, freq_vals, strict=True)
        if v.size
    }
    npu_freq = _floats(inside, "npu_freq_mhz")
    out["median_npu_freq_during_load_mhz"] = float(np.median(npu_freq)) if npu_freq.size else None
    caps = {int(_num(r["cpu_cap_mhz"])) for r in inside if r.get("cpu_cap_mhz") not in (None, "")}
    out["cpu_caps_during_load_mhz"] = sorted(caps)
    out["cpu_user_ms_per_request"], out["cpu_system_ms_per_request"] = _cpu_per_request(inside)
    out["states_during_load"] = sorted({str(r["state"]) for r in inside})
    out["telemetry_sources"] = sorted({str(r["source"]) for r in inside})
    return out


def _cpu_per_request(rows: list[dict[str, object]]) -> tuple[float | None, float | None]:
    """The board process's CPU split per request, from /proc/<pid>/stat-style counters (first → last
    direct sample in the window, same boot)."""
    direct = [r for r in rows if r.get("source") == "node" and r.get("node_served_total") not in (None, "")]
    if len(direct) < 2 or direct[0].get("boot_id") != direct[-1].get("boot_id"):
        return None, None
    first, last = direct[0], direct[-1]
    served = _num(last["node_served_total"]) - _num(first["node_served_total"])
    if served <= 0:
        return None, None
    user = (_num(last["process_cpu_user_s"]) - _num(first["process_cpu_user_s"])) * 1e3 / served
    system = (_num(last["process_cpu_system_s"]) - _num(first["process_cpu_system_s"])) * 1e3 / served
    return user, system
