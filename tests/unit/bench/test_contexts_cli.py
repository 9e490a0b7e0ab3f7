"""``npudure bench contexts`` with the measuring faked: the table, the operating point line, the result
folder and the record; and its usage errors (one line, exit 2, before any agent starts)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from npudure.cli import main
from npudure_workshop.bench import contexts
from npudure_workshop.bench.contexts import CountPoint, PathPoint, Sweep

# inf/s straight at the agent by count: 8 is within 2% of 16's peak.
CURVE = {1: 16.7, 2: 36.2, 4: 52.4, 8: 72.9, 16: 74.0}


def fake_measure(curve: dict[int, float | None], reported: dict[int, int] | None = None):
    seen: list[int] = []

    def measure(sweep: Sweep, n: int, folder: Path, note) -> CountPoint:
        seen.append(n)
        x = curve.get(n)
        path = PathPoint(x, 10.0 * n, 12.0 * n, 30.0 + n, 100.0 + 10 * n, int(x is not None), 1)
        if x is None:
            path.invalid_reasons = ["local-board1-agent-r0: host_saturated"]
        via = PathPoint(x and x * 0.9, 11.0 * n, 13.0 * n, 31.0, 101.0, int(x is not None), 1)
        return CountPoint(
            n,
            sweep_load(sweep, n),
            (reported or {}).get(n, n),
            {"agent": path, "scheduler": via},
            f"contexts-{n}",
        )

    return measure, seen


def sweep_load(sweep: Sweep, n: int) -> int:
    return int(n * sweep.load_factor)


def run(monkeypatch, tmp_path: Path, *argv: str, curve=CURVE, reported=None) -> tuple[int, list[int]]:
    measure, seen = fake_measure(curve, reported)
    monkeypatch.setattr(contexts, "measure_count", measure)
    return main(
        ["bench", "contexts", "--out", str(tmp_path / "out"), "--progress", "quiet", "--frames", "1", *argv]
    ), seen


def test_the_sweep_prints_the_table_and_the_operating_point_and_writes_its_folder(
    monkeypatch, tmp_path, capsys
) -> None:
    code, seen = run(monkeypatch, tmp_path)
    assert code == 0 and seen == [1, 2, 4, 8, 16]
    out = capsys.readouterr().out
    assert "backend sim (EMULATED NPU" in out and "time scale 1" in out
    assert "closed loop at 2 x contexts outstanding" in out and "host " in out
    assert (
        "operating point (straight at the agent): 8 contexts, 72.9 inf/s = 98.5% of the peak 74.0 inf/s at 16"
        in out
    )
    rows = [line.split() for line in out.splitlines() if line[:2] in {"1 ", "2 ", "4 ", "8 ", "16"}]
    assert [(r[0], r[1]) for r in rows][:2] == [("1", "agent"), ("1", "scheduler")] and len(rows) == 10
    folder = tmp_path / "out"
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["operating_point"]["agent"]["contexts"] == 8
    assert (
        json.loads((folder / "manifest.json").read_text())["conditions"]["concurrency_by_contexts"]["8"] == 16
    )
    assert (folder / "contexts.csv").read_text().count("\n") == 11
    assert "operating point" in (folder / "report.md").read_text()


def test_chosen_counts_get_the_default_added(monkeypatch, tmp_path) -> None:
    code, seen = run(monkeypatch, tmp_path, "--contexts", "2,1", "--load-factor", "3")
    assert code == 0 and seen == [1, 2, 8]


def test_invalid_runs_exit_3_and_name_their_reasons(monkeypatch, tmp_path, capsys) -> None:
    code, _ = run(monkeypatch, tmp_path, "--contexts", "1,2", curve={1: 10.0, 2: None, 8: 30.0})
    out = capsys.readouterr().out
    assert code == 3
    assert "invalid: 2 contexts, agent: local-board1-agent-r0: host_saturated" in out
    assert "operating point (straight at the agent): 8 contexts" in out


def test_counts_the_agent_did_not_apply_are_named_and_left_out(monkeypatch, tmp_path, capsys) -> None:
    code, _ = run(
        monkeypatch, tmp_path, "--contexts", "1,2", reported={1: 2, 8: 2}, curve={1: 50.0, 2: 50.0, 8: 50.0}
    )
    out = capsys.readouterr().out
    assert "WARNING: contexts 8: the agent runs 2 context(s)" in out
    assert "operating point (straight at the agent): 2 contexts" in out and code == 0


def test_record_writes_the_operating_point_beside_the_model(monkeypatch, tmp_path, capsys) -> None:
    model = tmp_path / "yolo.onnx"
    model.write_bytes(b"onnx")
    (tmp_path / "yolo.onnx.json").write_text(json.dumps({"input_size": 640}))
    code, _ = run(monkeypatch, tmp_path, "--backend", "onnx", "--record", str(model))
    assert code == 0
    record = json.loads((tmp_path / "yolo.onnx.json").read_text())
    assert record["contexts"] == 8 and record["input_size"] == 640
    assert f"recorded: contexts 8 in {tmp_path / 'yolo.onnx.json'}" in capsys.readouterr().out


def test_no_operating_point_leaves_the_record_alone(monkeypatch, tmp_path, capsys) -> None:
    model = tmp_path / "yolo.onnx"
    model.write_bytes(b"onnx")
    code, _ = run(monkeypatch, tmp_path, "--backend", "onnx", "--record", str(model), curve={})
    assert code == 3 and not (tmp_path / "yolo.onnx.json").exists()
    assert "no operating point" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--contexts", "0,2"], "from 1 to 64"),
        (["--contexts", "two"], "comma-separated whole numbers"),
        (["--load-factor", "0"], "must be above 0"),
        (["--backend", "gpu"], "invalid choice"),
    ],
)
def test_bad_arguments_exit_2(argv: list[str], says: str, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["bench", "contexts", *argv])
    assert exc.value.code == 2 and says in capsys.readouterr().err


def agent_yml(tmp_path: Path, text: str) -> str:
    path = tmp_path / "agent.yml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--record", "m.onnx"], "--record needs a model: the sim backend runs none"),
        (["--backend", "onnx", "--record", "missing.onnx"], "--record missing.onnx: no such model file"),
        (["--backend", "rknn"], "the rknn backend needs a model"),
        (["--backend", "onnx", "--model", "a.onnx", "--record", "b.onnx"], "the agents run a.onnx"),
        (["--agent-config", "nowhere.yml"], "config file not found"),
    ],
)
def test_arguments_that_cannot_work_together_exit_2_in_one_line(
    monkeypatch, tmp_path, argv, says, capsys
) -> None:
    monkeypatch.chdir(tmp_path)
    code, seen = run(monkeypatch, tmp_path, *argv)
    err = capsys.readouterr().err
    assert code == 2 and seen == [] and says in err and err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_a_bad_agent_config_is_one_line(monkeypatch, tmp_path, capsys) -> None:
    config = agent_yml(tmp_path, "node_name: b1\ncontexts: 0\n")
    code, seen = run(monkeypatch, tmp_path, "--agent-config", config)
    err = capsys.readouterr().err
    assert code == 2 and seen == [] and "contexts" in err and err.count("\n") == 1


def test_the_agent_configs_service_fields_are_replaced(monkeypatch, tmp_path) -> None:
    config = agent_yml(
        tmp_path,
        "node_name: rk1\nlisten: 0.0.0.0:50051\nmetrics_port: 50091\nbackend: sim\n"
        "postprocess: {score_threshold: 0.4}\nsim: {time_scale: 3.0}\n",
    )
    swept: list[Sweep] = []
    measure, _ = fake_measure(CURVE)

    def keep(sweep: Sweep, *rest) -> CountPoint:
        swept.append(sweep)
        return measure(sweep, *rest)

    monkeypatch.setattr(contexts, "measure_count", keep)
    assert (
        main(
            [
                "bench",
                "contexts",
                "--agent-config",
                config,
                "--contexts",
                "8",
                "--frames",
                "1",
                "--out",
                str(tmp_path / "o"),
            ]
        )
        == 0
    )
    assert swept[0].backend == "sim" and swept[0].time_scale == 3.0  # the board's own, unless given
    assert swept[0].base_agent == {"postprocess": {"score_threshold": 0.4}, "sim": {"time_scale": 3.0}}


def test_an_existing_result_folder_is_refused(monkeypatch, tmp_path, capsys) -> None:
    (tmp_path / "out").mkdir()
    code, seen = run(monkeypatch, tmp_path)
    assert code == 2 and seen == [] and "already exists" in capsys.readouterr().err
