"""Model sets through the command line: ``npudure agent --check`` self-tests every model's pool, a pool
that shares state is refused naming its model, a bad set or a bad ``npudure local --model`` is one line
with the right exit code."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.cli import ROOT, agent_config, run_npudure, run_service

pytestmark = pytest.mark.timeout(60)

TWO_SIM_MODELS = "backend: sim\ncontexts: 2\nmodels:\n  - name: general\n  - name: plates\n    contexts: 3\n"

# The agent's CLI with each model's backend swapped for echo contexts; the plates model's share state.
AGENT_WITH_ECHO_CONTEXTS = """
import sys
from helpers.echo_contexts import EchoBackend
import npudure.agent.cli as agent_cli
agent_cli.create_backend = lambda config, count: EchoBackend(count, shared="plates" in (config.model or ""))
from npudure.cli import main
sys.exit(main(["agent", "--config", sys.argv[1]]))
"""


def test_check_self_tests_every_models_pool(tmp_path: Path) -> None:
    config = tmp_path / "agent.yml"
    config.write_text(agent_config(TWO_SIM_MODELS))
    ok = run_npudure("agent", "--config", str(config), "--check")
    assert ok.returncode == 0, ok.stderr
    assert "model general: 2 context(s) (agent config)" in ok.stdout
    assert "model plates: 3 context(s) (agent config)" in ok.stdout
    assert ok.stdout.count("self-test passed") == 2


def test_a_model_whose_contexts_share_state_is_refused_by_name(tmp_path: Path) -> None:
    config = tmp_path / "agent.yml"
    general, plates = tmp_path / "g.onnx", tmp_path / "plates.onnx"
    models = f"  - name: general\n    model: {general}\n  - name: plates\n    model: {plates}\n"
    config.write_text(agent_config(f"backend: onnx\ncontexts: 4\nmodels:\n{models}"))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
        "NPUDURE_NO_REEXEC": "1",
    }
    bad = subprocess.run(
        [sys.executable, "-c", AGENT_WITH_ECHO_CONTEXTS, str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert bad.returncode == 78, bad.stderr
    lines = bad.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in bad.stderr, bad.stderr
    assert lines[0].startswith("npudure agent: model plates: self-test: context ")


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ("backend: sim\nmodel: /m/a.onnx\nmodels:\n  - name: a\n", "set either models or model"),
        ("backend: sim\nmodels:\n  - name: a\n  - name: a\n", "models: a listed twice"),
    ],
)
def test_a_bad_model_set_is_refused_in_the_config_errors_shape(tmp_path: Path, extra: str, says: str) -> None:
    done = run_service(tmp_path, "agent", agent_config(extra))
    assert done.returncode == 78 and "Traceback" not in done.stderr
    head, line = done.stderr.strip().splitlines()  # "FILE: invalid configuration", then the field's line
    assert head.endswith("agent.yml: invalid configuration") and says in line, done.stderr


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--model", "a=", "--model", "b.onnx"], "with several --model, name each one"),
        (["--model", "a=", "--model", "a="], "--model a= given twice"),
        (["--backend", "onnx", "--model", "a=/nowhere/a.onnx"], "--model a=/nowhere/a.onnx: no such file"),
    ],
)
def test_bad_local_models_are_one_line_exit_2(args: list[str], says: str) -> None:
    done = run_npudure("local", "--port", "0", *args)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip() == f"npudure local: {says}" or says in done.stderr, done.stderr


def test_a_bad_model_name_is_a_usage_error() -> None:
    done = run_npudure("local", "--model", "no spaces=x.onnx")
    assert done.returncode == 2 and "is not a model name" in done.stderr and "Traceback" not in done.stderr
