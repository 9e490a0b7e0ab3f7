"""Is a run valid? Checked by code, written into every result; invalid runs are kept and marked.

Every rule here is a way a plausible number once came out of a broken measurement. A run is
INVALID when:

* ``board_rebooted``      an asked board's boot id changed (before, during or after the run);
* ``boards_answered_differ`` the boards that answered differ from the boards asked for, over the
  whole window or within a quarter of it (a board that died or joined mid-run);
* ``board_not_up``        the scheduler saw an asked board DOWN/HOT/DRAINING/INACTIVE during the window;
* ``error_rate``          more than 1% of measured requests failed;
* ``too_few_samples``     fewer than 100 successful measured requests;
* ``generator_saturated`` the harness itself was the bottleneck (its event-loop thread above 90% of a
  core, or the whole process above 90% of all cores);
* ``scheduler_saturated`` a scheduler process used more than 90% of one core (only when its pid is
  known; otherwise the check is reported as "unknown", never as passed);
* ``lease``               the harness did not hold the scheduler's benchmark lease throughout;
* ``foreign_load``        the scheduler served clearly more requests than this harness sent (someone
  else was loading the cluster);
* ``rate_not_offered``    open loop: the generator sent < 95% of the scheduled requests in the window;
* ``emulation_lag``       an emulated (sim) board's slots took more than 5% longer than its model over
  the window (Δ achieved / Δ modelled service seconds − 1, from the board's own counters): the host
  running the boards was saturated, so the figures measure the host, not the modelled boards;
* ``host_saturated``      the harness and the scheduler share this host (its pid was found here; in the
  lab the emulated boards share its kernel too) and the host's CPUs were less than 5% idle over the
  run, or more than 5% of their time was stolen by the hypervisor.

The 5% lag bound: on an idle 2-core VM a 12 ms sleep overshoots by ~0.1 ms (≈1%), and the jitter
model's own mean is 1, so 5% is far above the noise and well below the lag of a saturated host
(measured 20-60%, see docs/sim-model.md).

Boards the caller declared in the spec's ``expect_reboot`` (a fault suite's planned reboot) are exempt
from the first three rules; what happened to them is noted as an ``expected_reboot:`` warning.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

MAX_ERROR_RATE = 0.01
MIN_SAMPLES = 100
SATURATED_FRACTION = 0.90
# A quarter of the window is checked for missing boards only when it holds at least this many
# successful samples per asked board (otherwise a board may be absent by chance).
SEGMENT_MIN_PER_BOARD = 5
# Served by the scheduler beyond our own requests, tolerated (health probes do not count; this is slack).
FOREIGN_SLACK_FRACTION = 0.01
FOREIGN_SLACK_ABS = 10
MAX_EMULATION_LAG = 0.05
# Frames a board must have served inside the window for its lag to be judged.
MIN_EMULATION_FRAMES = 20
HOST_MIN_IDLE_FRACTION = 0.05
HOST_MAX_STEAL_FRACTION = 0.05


def check(
    meta: Mapping[str, Any],
    figures: Mapping[str, Any],
    telemetry_rows: Sequence[Mapping[str, Any]],
) -> tuple[list[str], list[str]]:
    """(reasons the run is invalid, warnings). Each reason starts with its rule name."""
    reasons: list[str] = []
    warnings: list[str] = []
    asked = list(meta["spec"]["boards"])
    window = (float(meta["window_start_s"]), float(meta["window_end_s"]))

    # Boards the caller declared it would reboot or take away (a fault suite): what happens to them is
    # noted as "expected_reboot: ..." (a warning), and the other boards are held to every rule.
    expected = [b for b in asked if b in set(meta["spec"].get("expect_reboot") or ())]
    strict = [b for b in asked if b not in expected]
    reasons += _boot_ids(meta, telemetry_rows, strict)
    reasons += _answered(figures, asked, optional=set(expected))
    reasons += _states(telemetry_rows, strict, window)
    warnings += _expected(meta, figures, telemetry_rows, expected, window)

    measured = int(figures["samples_ok"]) + int(figures["samples_error"])
    rate = float(figures["error_rate"]) if measured else 0.0
    if rate > MAX_ERROR_RATE:
        reasons.append(
            f"error_rate: {rate:.2%} of {measured} measured requests failed (limit {MAX_ERROR_RATE:.0%})"
        )
    if int(figures["samples_ok"]) < MIN_SAMPLES:
        reasons.append(
            f"too_few_samples: {figures['samples_ok']} successful measured requests (need {MIN_SAMPLES})"
        )

    gen = meta.get("generator_cpu") or {}
    loop_f = gen.get("loop_thread_fraction_of_core")
    proc_f = gen.get("process_fraction_of_core")
    cores = int(gen.get("cpu_count") or 1)
    if loop_f is not None and loop_f > SATURATED_FRACTION:
        reasons.append(f"generator_saturated: the harness event-loop thread used {loop_f:.0%} of a core")
    elif proc_f is not None and proc_f > SATURATED_FRACTION * cores:
        reasons.append(
            f"generator_saturated: the harness process used {proc_f:.0%} of one core on a {cores}-core host"
        )

    sched = meta.get("scheduler_cpu") or {}
    if sched.get("status") == "measured":
        for pid, frac in (sched.get("fraction_of_core_by_pid") or {}).items():
            if frac is not None and frac > SATURATED_FRACTION:
                reasons.append(f"scheduler_saturated: scheduler pid {pid} used {frac:.0%} of a core")
    else:
        warnings.append(f"scheduler CPU check unknown: {sched.get('reason', 'not measured')}")

    lease = meta.get("lease_problem")
    if lease:
        reasons.append(f"lease: {lease}")

    reasons += _foreign(meta)

    schedule = meta.get("schedule") or {}
    if schedule.get("rate_not_offered"):
        reasons.append(
            f"rate_not_offered: the generator sent {schedule.get('sent_fraction_of_schedule', 0):.1%} of the "
            "scheduled requests inside the window"
        )
    elif schedule.get("generator_behind_schedule"):
        warnings.append(f"open-loop sends were late: p99 lag {schedule.get('send_lag_p99_ms', 0):.1f} ms")

    lag_reasons, lag_warnings = _emulation_lag(telemetry_rows, asked, window)
    reasons += lag_reasons
    warnings += lag_warnings
    host_reason = _host_saturated(meta.get("host_cpu"))
    if host_reason:
        reasons.append(host_reason)
    host = meta.get("host_cpu_busy_fraction")
    if host_reason is None and isinstance(host, float) and host > 0.95:
        warnings.append(
            f"the harness host's CPUs were {host:.0%} busy: on a local cluster the host, not the "
            "boards, may be the bottleneck"
        )
    if not any(window[0] <= float(r["t_s"]) <= window[1] for r in telemetry_rows):
        warnings.append("no telemetry sample fell inside the measurement window")
    return reasons, warnings


def _boot_ids(meta: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], asked: list[str]) -> list[str]:
    seen: dict[str, list[str]] = {b: [] for b in asked}

    def note(board: str, boot_id: object) -> None:
        if board in seen and boot_id not in (None, "") and (not seen[board] or seen[board][-1] != boot_id):
            seen[board].append(str(boot_id))

    for board, boot in (meta.get("boot_ids_before") or {}).items():
        note(board, boot)
    for row in sorted(rows, key=lambda r: float(r["t_s"])):
        note(str(row["board"]), row.get("boot_id"))
    for board, boot in (meta.get("boot_ids_after") or {}).items():
        note(board, boot)
    return [
        f"board_rebooted: {board}'s boot id changed {' -> '.join(ids)}"
        for board, ids in seen.items()
        if len(set(ids)) > 1
    ]


def _answered(figures: Mapping[str, Any], asked: list[str], optional: set[str] | None = None) -> list[str]:
    optional = optional or set()  # boards allowed to be missing (expected to reboot)
    want = set(asked) - optional
    reasons = []
    whole = set(figures["answered_boards"]) - optional
    if whole != want:
        missing, extra = sorted(want - whole), sorted(whole - want)
        reasons.append(
            "boards_answered_differ: asked "
            + ", ".join(sorted(want))
            + (f"; never answered: {', '.join(missing)}" if missing else "")
            + (f"; answered but not asked: {', '.join(extra)}" if extra else "")
        )
    for seg in figures.get("answered_by_quarter", []):
        if seg["samples_ok"] < SEGMENT_MIN_PER_BOARD * len(want):
            continue
        got = set(seg["boards"]) - optional
        if got != want:
            reasons.append(
                f"boards_answered_differ: in quarter {seg['quarter']} of the window "
                f"({seg['start_s']:.1f}-{seg['end_s']:.1f} s) "
                + (f"{', '.join(sorted(want - got))} did not answer" if want - got else "")
                + (f"{', '.join(sorted(got - want))} answered unasked" if got - want else "")
            )
    return reasons


def _states(rows: Sequence[Mapping[str, Any]], asked: list[str], window: tuple[float, float]) -> list[str]:
    bad: dict[str, set[str]] = {}
    for row in rows:
        if row["board"] in asked and window[0] <= float(row["t_s"]) <= window[1] and row["state"] != "UP":
            bad.setdefault(str(row["board"]), set()).add(str(row["state"]))
    return [
        f"board_not_up: the scheduler saw {b} {'/'.join(sorted(s))} during the window"
        for b, s in sorted(bad.items())
    ]


def _expected(
    meta: Mapping[str, Any],
    figures: Mapping[str, Any],
    rows: Sequence[Mapping[str, Any]],
    expected: list[str],
    window: tuple[float, float],
) -> list[str]:
    """What happened to the boards expected to reboot, as notes ("expected_reboot: ...")."""
    if not expected:
        return []
    events = _boot_ids(meta, rows, expected) + _states(rows, expected, window)
    quarters = figures.get("answered_by_quarter", [])
    absent = [b for b in expected if any(b not in q["boards"] for q in quarters if q["samples_ok"])]
    events += [f"{b} did not answer in part of the window" for b in absent]
    return [f"expected_reboot: {e.split(': ', 1)[-1]}" for e in events]


def _foreign(meta: Mapping[str, Any]) -> list[str]:
    before, after = meta.get("cluster_served_before"), meta.get("cluster_served_after")
    ours = meta.get("responses_ok_total")
    if before is None or after is None or ours is None:
        return []
    foreign = int(after) - int(before) - int(ours)
    if foreign > max(FOREIGN_SLACK_ABS, FOREIGN_SLACK_FRACTION * int(ours)):
        return [
            f"foreign_load: the scheduler served {foreign} more requests than this harness sent during the "
            "run: another client was loading the cluster"
        ]
    return []


def emulation_lag_by_board(
    rows: Sequence[Mapping[str, Any]], asked: list[str], window: tuple[float, float]
) -> dict[str, float | None]:
    """Each emulated board's lag over the window: Δ achieved / Δ modelled service seconds − 1, from the
    first to the last sample inside the window with the same boot id (boards' own samples first, the
    scheduler's cached copy otherwise). None: too little service to judge. Real boards are absent."""
    out: dict[str, float | None] = {}
    for board in asked:
        mine = [
            r
            for r in rows
            if r["board"] == board
            and window[0] <= float(r["t_s"]) <= window[1]
            and r.get("emulation_model_total_s") not in (None, "")
        ]
        direct = [r for r in mine if r.get("source") == "node"]
        pick = sorted(direct if len(direct) >= 2 else mine, key=lambda r: float(r["t_s"]))
        if not pick:
            continue
        first, last = pick[0], pick[-1]
        model = float(last["emulation_model_total_s"]) - float(first["emulation_model_total_s"])
        actual = float(last["emulation_actual_total_s"]) - float(first["emulation_actual_total_s"])
        frames = float(last.get("node_served_total") or 0) - float(first.get("node_served_total") or 0)
        same_boot = first.get("boot_id") == last.get("boot_id")
        out[board] = (
            actual / model - 1 if same_boot and model > 0 and frames >= MIN_EMULATION_FRAMES else None
        )
    return out


def _emulation_lag(
    rows: Sequence[Mapping[str, Any]], asked: list[str], window: tuple[float, float]
) -> tuple[list[str], list[str]]:
    lags = emulation_lag_by_board(rows, asked, window)
    late = {b: lag for b, lag in lags.items() if lag is not None and lag > MAX_EMULATION_LAG}
    reasons = []
    if late:
        worst = max(late.values())
        named = ", ".join(f"{b} {lag:.0%}" for b, lag in sorted(late.items()))
        reasons.append(
            f"emulation_lag: the emulated boards fell behind their model by {worst:.0%} ({named}; bound "
            f"{MAX_EMULATION_LAG:.0%}): this host is saturated; raise --time-scale or use fewer boards"
        )
    unjudged = sorted(b for b, lag in lags.items() if lag is None)
    warnings = [f"emulation lag not judged for {', '.join(unjudged)}: too few samples"] if unjudged else []
    return reasons, warnings


def _host_saturated(host: object) -> str | None:
    if not isinstance(host, Mapping) or not host.get("shared_with_cluster"):
        return None
    idle, steal = float(host["idle_fraction"]), float(host["steal_fraction"])
    steal_limit = float(host.get("steal_limit", HOST_MAX_STEAL_FRACTION))  # runs recorded before it existed
    cores = host.get("cpu_count", "?")
    if idle < HOST_MIN_IDLE_FRACTION:
        return (
            f"host_saturated: this {cores}-core host, shared by the harness, the scheduler and any local "
            f"boards, was {idle:.1%} idle over the run (need {HOST_MIN_IDLE_FRACTION:.0%}): the figures "
            "measure the host; raise --time-scale, use fewer boards or a bigger host"
        )
    if steal > steal_limit:
        return (
            f"host_saturated: the hypervisor stole {steal:.1%} of this {cores}-core host's CPU time over "
            f"the run (limit {steal_limit:.0%}, --max-steal): the figures measure the neighbours"
        )
    return None
