"""The experiments without a cluster: their plans, the registry, the session's one run loop, and the
aggregates computed from fake runs whose figures are set by hand here (not taken from the code)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from npudure.proto import inference_pb2 as pb
from npudure.scheduler.policies import POLICIES
from npudure_workshop.bench import agent_cpu, experiments
from npudure_workshop.bench.cluster import BenchError
from npudure_workshop.bench.experiments import PlanContext
from npudure_workshop.bench.experiments.sweep import operating_concurrency
from npudure_workshop.bench.runs import RunData
from npudure_workshop.bench.samples import STAGES, Samples
from npudure_workshop.bench.session import BenchSession
from npudure_workshop.bench.spec import RunSpec

BOARDS = ("board1", "board2", "board3")
CTX = PlanContext(BOARDS, "x")


def plan(kind: str, ctx: PlanContext = CTX, **params: Any) -> list[RunSpec]:
    return experiments.get(kind).plan(ctx, **params).specs


# ------------------------------------------------------------------------------------------ registry
def test_every_experiment_module_is_registered_once_under_its_kind() -> None:
    modules = {p.stem for p in Path(experiments.__file__).parent.glob("*.py")} - {"__init__", "base"}
    assert set(experiments.kinds()) == modules
    for kind in experiments.kinds():
        assert experiments.get(kind).kind == kind
    with pytest.raises(ValueError, match="unknown experiment kind 'nope'"):
        experiments.get("nope")


def test_planned_specs_name_their_experiment_and_series() -> None:
    params: dict[str, dict[str, Any]] = {
        "sweep": {"per_board": [1, 2]},
        "scaling": {"per_board": 2},
        "hetero": {"per_board": 2, "ladder": [600], "policies": ["round_robin"]},
        "openloop": {"rates": [10.0]},
        "capacity": {"per_board": 2, "policies": ["ect"]},
        "local": {"per_board": 2},
    }
    assert set(params) == set(experiments.kinds())
    for kind, kw in params.items():
        specs = plan(kind, **kw)
        assert specs, kind
        assert {s.experiment for s in specs} == {kind} and {s.series for s in specs} == {"x"}
        assert len({s.run_id for s in specs}) == len(specs), f"{kind}: run ids repeat"
        assert all(s.run_id.startswith("x-") for s in specs)


# ------------------------------------------------------------------------------------------ plans
def test_sweep_plan_multiplies_per_board_concurrency_and_alternates_direction() -> None:
    specs = plan("sweep", per_board=[4, 1, 2, 2], repetitions=2)
    assert [s.per_board_concurrency for s in specs] == [1, 2, 4, 4, 2, 1]
    assert [s.concurrency for s in specs[:3]] == [3, 6, 12]
    assert [s.repetition for s in specs] == [0, 0, 0, 1, 1, 1]
    with pytest.raises(ValueError, match="positive integers"):
        plan("sweep", per_board=[0, 2])


def test_scaling_plan_grows_the_active_set_from_the_first_board() -> None:
    specs = plan("scaling", per_board=3, repetitions=1, boards_max=2)
    assert [s.boards for s in specs] == [("board1",), ("board1", "board2")]
    assert [s.concurrency for s in specs] == [3, 6]


def test_hetero_plan_starts_each_policy_at_no_cap_and_names_the_board() -> None:
    specs = plan("hetero", per_board=2, ladder=[1200, 600], policies=["round_robin", "ect"], board="board2")
    assert [(s.policy, s.caps) for s in specs[:3]] == [
        ("round_robin", {"board2": 0}),
        ("round_robin", {"board2": 1200}),
        ("round_robin", {"board2": 600}),
    ]
    assert len(specs) == 6 and all(s.cap_board == "board2" for s in specs)
    with pytest.raises(ValueError, match="not an active board"):
        plan("hetero", per_board=2, ladder=[600], policies=["ect"], board="board9")
    with pytest.raises(ValueError, match="at least 2 boards"):
        plan("hetero", PlanContext(("board1",), "x"), per_board=2, ladder=[600], policies=["ect"])


def test_capacity_plan_measures_each_board_alone_then_together_per_policy_all_capped() -> None:
    specs = plan("capacity", per_board=2, policies=["round_robin", "ect"], cap_mhz=816)
    alone = [s for s in specs if len(s.boards) == 1]
    together = [s for s in specs if len(s.boards) == 3]
    assert sorted(s.boards[0] for s in alone) == list(BOARDS)
    assert all(s.concurrency == 2 and s.policy is None for s in alone)
    assert [s.policy for s in together] == ["round_robin", "ect"]
    assert all(s.concurrency == 6 for s in together)
    assert all(s.caps == {"board1": 816} and s.cap_board == "board1" for s in specs)
    # Proxyless: the scheduler's policy routes nothing, so the boards run together once.
    proxyless = plan(
        "capacity", PlanContext(BOARDS, "x-proxyless", "proxyless"), per_board=2, policies=["ect"]
    )
    assert [s.policy for s in proxyless if len(s.boards) == 3] == [None]
    assert {s.via for s in proxyless} == {"proxyless"}


def test_local_plan_pairs_each_board_straight_and_through_the_cluster() -> None:
    specs = plan("local", per_board=4, repetitions=2)
    assert len(specs) == 12
    for b in BOARDS:
        mine = [s for s in specs if s.boards == (b,)]
        assert sorted(s.via for s in mine) == ["agent", "agent", "scheduler", "scheduler"]
    assert [s.via for s in specs[:2]] == ["agent", "scheduler"]
    assert [s.via for s in specs[6:8]] != [s.via for s in specs[:2]]  # order alternates per repetition
    assert {s.concurrency for s in specs} == {4}
    only = plan("local", PlanContext(BOARDS, "x", "proxyless"), per_board=1, board="board3")
    assert [(s.boards, s.via) for s in only] == [(("board3",), "agent"), (("board3",), "proxyless")]


def test_every_policy_a_plan_defaults_to_is_a_scheduler_policy() -> None:
    from npudure_workshop.bench import cli
    from npudure_workshop.bench.defaults import CAPACITY_POLICIES

    names = {*CAPACITY_POLICIES, *cli._policies(cli.FULL["hetero_policies"])}
    assert names <= set(POLICIES)
    with pytest.raises(Exception, match="unknown policy 'fastest'"):
        cli._policies("round_robin,fastest")


# ------------------------------------------------------------------------------------------ the run loop
class _FakeProgress:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def experiment(self, name: str, runs: int) -> None:
        self.lines.append(f"{name}: {runs}")

    def note(self, line: str) -> None:
        self.lines.append(line)


class _FakeAdmin:
    def status(self) -> Any:
        return dataclasses.make_dataclass("S", [("policy", str)])("least_inflight")


class _FakeGuard:
    resets = 0

    def reset_caps(self) -> None:
        self.resets += 1


def test_the_session_executes_a_plan_in_order_numbering_every_run() -> None:
    bench = BenchSession("127.0.0.1:1")
    bench.boards = list(BOARDS)
    bench.progress = _FakeProgress()  # type: ignore[assignment]
    executed: list[RunSpec] = []
    bench.execute = executed.append  # type: ignore[assignment,method-assign]
    bench.aggregate = lambda series: {"series": series, "warnings": ["w1"]}  # type: ignore[method-assign]
    # What an open session holds: here only the cluster's admin and guard are used.
    bench._open = SimpleNamespace(hold=SimpleNamespace(admin=_FakeAdmin(), guard=_FakeGuard()))  # type: ignore[assignment]
    first = bench.run("scaling", per_board=2, repetitions=1)
    second = bench.run("scaling", "proxyless", per_board=2, repetitions=1)
    third = bench.scaling(2, repetitions=1)
    assert (first["series"], second["series"], third["series"]) == (
        "scaling",
        "scaling-proxyless",
        "scaling-2",
    )
    assert [s.sequence for s in executed] == list(range(1, 10))
    assert [s.via for s in executed[3:6]] == ["proxyless"] * 3
    assert "warning: w1" in bench.progress.lines  # type: ignore[attr-defined]
    assert bench.guard.resets == 3  # type: ignore[attr-defined]  # caps put back after every experiment
    with pytest.raises(ValueError, match="--mode 'sideways'"):
        bench.run("scaling", "sideways", per_board=2)
    # A plan of no runs (repetitions 0, from code; the CLI refuses it) is an error in words, not an
    # IndexError from aggregating an empty series; nothing is executed.
    with pytest.raises(BenchError, match="plan no run"):
        bench.run("scaling", per_board=2, repetitions=0)
    assert len(executed) == 9


# ------------------------------------------------------------------------------------------ aggregates
def fake_run(spec: RunSpec, latency_ms: dict[str, float], throughput: float, valid: bool = True) -> RunData:
    """A run whose every request to a board took exactly that board's ``latency_ms``: 50 requests each."""
    names = list(latency_ms)
    n = 50 * len(names)
    node = np.repeat(np.arange(len(names)), 50).astype(np.int16)
    sent = np.linspace(1.0, 3.0, n)
    lat = np.array([latency_ms[names[i]] for i in node]) / 1e3
    samples = Samples(
        intended_s=sent,
        sent_s=sent,
        done_s=sent + lat,
        status_code=np.zeros(n, np.int16),
        node_idx=node,
        attempts=np.ones(n, np.uint8),
        emulated=np.ones(n, bool),
        backend_idx=np.zeros(n, np.int16),
        stage_us=np.zeros((n, len(STAGES)), np.uint64),
        node_names=names,
        backend_names=["sim"],
    )
    meta = {
        "spec": {**dataclasses.asdict(spec), "boards": list(spec.boards)},
        "window_start_s": 0.5,
        "window_end_s": 3.5,
        "settings": {"harness_connections": 2, "warmup_s": 0.5},
        "frames": {"encoding": "raw", "payload_bytes_mean": 1228800.0},
        "cluster_before": {"policy": spec.policy or "least_inflight", "connections_per_board": 2},
    }
    summary = {"valid": valid, "throughput_inf_per_s": throughput, "backend": "EMULATED NPU (sim backend)"}
    summary.update(window_s=3.0, policy=spec.policy, invalid_reasons=[] if valid else ["x: y"])
    return RunData(spec.run_id, meta, samples, [], summary)


def _runs(specs: Sequence[RunSpec], figures: dict[str, tuple[dict[str, float], float]]) -> list[RunData]:
    return [fake_run(s, *figures[s.run_id]) for s in specs]


def test_sweep_operating_point_is_the_lowest_concurrency_within_98_percent_of_peak() -> None:
    specs = plan("sweep", per_board=[1, 2, 4])
    thr = {"x-c001-r0": 50.0, "x-c002-r0": 99.0, "x-c004-r0": 100.0}
    agg = experiments.get("sweep").aggregate([fake_run(s, {"board1": 10.0}, thr[s.run_id]) for s in specs])
    assert operating_concurrency(agg) == 2  # 99 ≥ 0.98 × 100; 50 is not
    assert agg["points"]["1"]["fraction_of_peak"] == pytest.approx(0.5)


def test_scaling_efficiency_and_invalid_runs_left_out() -> None:
    specs = plan("scaling", per_board=2, repetitions=2)
    thr = {
        "x-n1-r0": 40.0,
        "x-n1-r1": 40.0,
        "x-n2-r0": 76.0,
        "x-n2-r1": 10.0,
        "x-n3-r0": 108.0,
        "x-n3-r1": 108.0,
    }
    runs = [
        fake_run(s, {b: 10.0 for b in s.boards}, thr[s.run_id], valid=s.run_id != "x-n2-r1") for s in specs
    ]
    agg = experiments.get("scaling").aggregate(runs)
    assert agg["points"]["2"]["efficiency"] == pytest.approx(76 / 80)  # the invalid 10 inf/s run is out
    assert agg["points"]["3"]["efficiency"] == pytest.approx(108 / 120)
    assert agg["points"]["2"]["invalid_runs"] == {"x-n2-r1": ["x: y"]}


@pytest.mark.parametrize(
    ("kind", "params", "key", "first", "own"),
    [
        ("sweep", {"per_board": [2, 1]}, "per_board_concurrency", 1, {"fraction_of_peak": 0.5}),
        (
            "scaling",
            {"per_board": 1, "boards_max": 2, "repetitions": 1},
            "n_boards",
            1,
            {"efficiency_pct": 100.0},
        ),
        ("openloop", {"rates": [12.5, 30]}, "rate_target_inf_per_s", 12.5, {"send_lag_p99_ms_max": 0.0}),
    ],
)
def test_a_point_experiments_csv_rows_carry_the_points_number_then_their_own_columns(
    kind: str, params: dict[str, Any], key: str, first: float, own: dict[str, Any]
) -> None:
    specs = plan(kind, **params)
    runs = [fake_run(s, {b: 10.0 for b in s.boards}, 20.0 * (i + 1)) for i, s in enumerate(specs)]
    tables = experiments.get(kind).tables(kind, experiments.get(kind).aggregate(runs))
    assert set(tables) == {f"{kind}.csv", f"{kind}_boards.csv", f"{kind}_stages.csv"}
    row = tables[f"{kind}.csv"][0]
    assert row[key] == first and type(row[key]) is type(first)
    assert {k: row[k] for k in own} == own
    assert row["throughput_mean_inf_per_s"] == pytest.approx(20.0)
    assert tables[f"{kind}_boards.csv"][0][key] == first


def test_capacity_fraction_of_summed_capacity_and_spread_per_policy() -> None:
    ctx = PlanContext(("board1", "board2"), "capacity")
    specs = plan("capacity", ctx, per_board=2, policies=["round_robin", "ect"])
    figures = {
        "capacity-alone-board1-r0": ({"board1": 40.0}, 20.0),  # the capped board
        "capacity-alone-board2-r0": ({"board2": 20.0}, 45.0),
        "capacity-round_robin-r0": ({"board1": 120.0, "board2": 30.0}, 39.0),
        "capacity-ect-r0": ({"board1": 42.0, "board2": 40.0}, 63.0),
    }
    agg = experiments.get("capacity").aggregate(_runs(specs, figures))
    assert agg["capacity_sum_inf_per_s"] == pytest.approx(65.0)
    assert agg["policies"]["round_robin"]["fraction_of_capacity"] == pytest.approx(39 / 65)
    assert agg["policies"]["ect"]["fraction_of_capacity"] == pytest.approx(63 / 65)
    assert agg["policies"]["round_robin"]["spread_mean_latency_x"] == pytest.approx(4.0)
    assert agg["policies"]["ect"]["slowest_board"] == "board1"
    assert (agg["cap_board"], agg["cap_mhz"]) == ("board1", 816)
    tables = experiments.get("capacity").tables("capacity", agg)
    pct = {r["policy"]: r["fraction_of_capacity_pct"] for r in tables["capacity.csv"]}
    assert pct == pytest.approx({"round_robin": 60.0, "ect": 96.923}, 1e-4)
    text = "\n".join(experiments.get("capacity").summary_lines("capacity", agg))
    assert "96.9% of summed capacity" in text and "spread 4.00×" in text


def test_capacity_without_a_boards_alone_figure_says_so_instead_of_a_fraction() -> None:
    ctx = PlanContext(("board1", "board2"), "capacity")
    specs = plan("capacity", ctx, per_board=2, policies=["ect"])
    runs = [
        fake_run(s, {b: 10.0 for b in s.boards}, 30.0, valid="alone-board2" not in s.run_id) for s in specs
    ]
    agg = experiments.get("capacity").aggregate(runs)
    assert agg["capacity_sum_inf_per_s"] is None and agg["policies"]["ect"]["fraction_of_capacity"] is None
    assert any("board2 alone" in w for w in agg["warnings"])


def test_local_compares_each_board_straight_with_the_cluster_path() -> None:
    ctx = PlanContext(("board1",), "local")
    specs = plan("local", ctx, per_board=2)
    figures = {
        "local-board1-agent-r0": ({"board1": 20.0}, 100.0),
        "local-board1-scheduler-r0": ({"board1": 21.5}, 95.0),
    }
    agg = experiments.get("local").aggregate(_runs(specs, figures))
    b = agg["boards"]["board1"]
    assert b["cluster_via"] == "scheduler"
    assert b["cluster_over_local_x"] == pytest.approx(0.95)
    assert b["added_latency_p50_ms"] == pytest.approx(1.5)
    row = experiments.get("local").tables("local", agg)["local.csv"][0]
    assert row["local_throughput_inf_per_s"] == 100.0 and row["cluster_throughput_inf_per_s"] == 95.0
    assert "straight to the agent" in "\n".join(experiments.get("local").markdown("local", agg))


def test_local_reports_the_agents_cpu_per_frame_median_over_runs() -> None:
    ctx = PlanContext(("board1",), "local")
    specs = plan("local", ctx, per_board=2, repetitions=3)
    runs = [fake_run(s, {"board1": 20.0}, 100.0) for s in specs]
    for i, run in enumerate(runs):  # three runs per path: 1, 2, 3 ms of reply on the loop
        run.meta["agent_cpu_ms_per_frame"] = {
            "board1": {"reply/loop": 1.0 + i // 2, "loop_thread": 2.0 + i // 2, "stages": 1.0 + i // 2}
        }
    agg = experiments.get("local").aggregate(runs)
    cpu = agg["boards"]["board1"]["agent_cpu_ms_per_frame"]
    assert set(cpu) == {"local", "cluster"} and cpu["local"]["reply/loop"] in (1.0, 2.0, 3.0)
    assert sorted([cpu["local"]["reply/loop"], cpu["cluster"]["reply/loop"]]) == [2.0, 2.0]
    lines = "\n".join(experiments.get("local").summary_lines("local", agg))
    assert "agent CPU (local): event-loop thread 3.000 ms/frame, stages 2.000" in lines


def test_agent_cpu_per_frame_from_a_fresh_agents_zero_counters() -> None:
    fresh = agent_cpu.counters(pb.NodeStatus())  # an agent that has answered nothing yet
    after = agent_cpu.counters(
        pb.NodeStatus(
            stage_cpu=[pb.StageCpu(stage="reply", thread="loop", seconds=0.02)],
            stage_cpu_frames=10,
            loop_thread_cpu_s=0.05,
        )
    )
    ms = agent_cpu.per_frame_ms(fresh, after)
    assert ms == pytest.approx({"reply/loop": 2.0, "loop_thread": 5.0, "stages": 2.0})
    assert agent_cpu.per_frame_ms(fresh, fresh) is None  # no frames in between: nothing to divide
    assert agent_cpu.per_frame_ms(None, after) is None  # no status before: unknown, never guessed
