"""The board side on the Pythons board images ship: 3.10 (Ubuntu 22.04) and 3.12 (Ubuntu 24.04).

For each interpreter found (pyenv builds under /root/.pyenv/versions, or pythonX.Y on PATH) a venv
with the runtime's dependencies is made once and cached (~/.cache/npudure/pyvenvs); the code under
test comes from this tree (PYTHONPATH: the runtime, and the workshop as playbooks/benchmark.yml brings
it to a board for `npudure bench contexts`, beside the venv), so the venv never goes stale. Then:
every board-side module imports, an agent process starts on that interpreter and answers one
inference (sim backend), and the agent's unit tests run there. Interpreters that are absent, or a venv
that cannot be installed (no package index and no pip cache), skip with the reason.
"""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import grpc
import numpy as np
import pytest
import yaml

from npudure.proto import inference_pb2 as pb
from npudure.proto import inference_pb2_grpc as rpc
from npudure_workshop.lab.local import _terminate, free_port, wait_serving

ROOT = Path(__file__).resolve().parents[2]
# Both wings come from this tree, ahead of the runtime the venv installed for its dependencies.
PYTHONPATH = os.pathsep.join([str(ROOT), str(ROOT / "workshop")])
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "npudure" / "pyvenvs"
# What runs on a board: the agent and its CLI, backends, affinity, and what they import; and
# `npudure bench contexts` (playbooks/benchmark.yml), with the agents and scheduler it starts there.
BOARD_PACKAGES = (
    "npudure.agent",
    "npudure.backends",
    "npudure.affinity",
    "npudure_workshop.bench",
    "npudure_workshop.bench.experiments",
    "npudure.scheduler",
)
BOARD_MODULES = (
    "npudure.cli",
    "npudure.config",
    "npudure.board.cpufreq",
    "npudure.board.sysfs",
    "npudure.board.soc",
    "npudure.board.telemetry",
    "npudure.vision.frames",
    "npudure.vision.postprocess",
    "npudure.service.runtime",
    "npudure.security.access",
    "npudure.client.status",
    "npudure_workshop.lab.local",
)
# What the agent's tests below need besides the package (pytest-asyncio: their async tests).
TEST_TOOLS = ("pytest>=8,<10", "pytest-timeout>=2.3,<3", "pytest-asyncio>=1.2,<2")
AGENT_UNIT_TESTS = (
    "tests/integration/test_hang_recovery.py",
    "tests/integration/test_cpu_cap_ladder.py",
    "tests/unit/board/test_soc.py",
)


def find_python(version: str) -> str | None:
    built = sorted(glob.glob(f"/root/.pyenv/versions/{version}.*/bin/python"))
    return built[-1] if built else shutil.which(f"python{version}")


def cached_venv(python: str, version: str) -> Path:
    """A venv with the package's dependencies, keyed on pyproject.toml (rebuilt when it changes)."""
    key = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + repr(TEST_TOOLS).encode()).hexdigest()[:12]
    venv = CACHE / f"py{version}-{key}"
    marker = venv / ".complete"
    if marker.exists():
        return venv
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([python, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=120)
    install = subprocess.run(
        [str(venv / "bin/pip"), "install", "--quiet", str(ROOT), *TEST_TOOLS],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if install.returncode != 0:
        shutil.rmtree(venv, ignore_errors=True)
        last = (install.stderr.strip().splitlines() or ["?"])[-1]
        pytest.skip(f"cannot install the dependencies for Python {version} (offline?): {last}")
    marker.write_text(python + "\n")
    return venv


def run(venv: Path, *args: str, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": PYTHONPATH, "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(
        [str(venv / "bin/python"), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


IMPORT_ALL = f"""
import importlib, pkgutil, sys
assert sys.version_info[:2] == tuple(map(int, sys.argv[1].split("."))), sys.version
names = list({BOARD_MODULES!r})
for package in {BOARD_PACKAGES!r}:
    module = importlib.import_module(package)
    names += [f"{{package}}.{{m.name}}" for m in pkgutil.iter_modules(module.__path__)]
for name in names:
    module = importlib.import_module(name)
    assert module.__file__.startswith(sys.argv[2]), (name, module.__file__)
print(len(names), "modules")
"""


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("version", ["3.10", "3.12"])
def test_board_side_runs_on(version: str, tmp_path: Path) -> None:
    python = find_python(version)
    if python is None:
        pytest.skip(f"no Python {version} here (looked in /root/.pyenv/versions and PATH)")
    venv = cached_venv(python, version)

    imported = run(venv, "-c", IMPORT_ALL, version, str(ROOT))
    assert imported.returncode == 0, imported.stderr[-2000:]

    address = f"127.0.0.1:{free_port()}"
    config = tmp_path / "agent.yml"
    config.write_text(yaml.safe_dump({"node_name": f"py{version}", "listen": address, "metrics_port": 0}))
    log = tmp_path / "agent.log"
    env = {**os.environ, "PYTHONPATH": PYTHONPATH}
    with log.open("wb") as out:
        agent = subprocess.Popen(
            [str(venv / "bin/python"), "-m", "npudure", "agent", "--config", str(config)],
            stdout=out,
            stderr=out,
            env=env,
        )
    try:
        wait_serving(address, 60, agent)
        frame = np.zeros((640, 640, 3), dtype=np.uint8).tobytes()
        with grpc.insecure_channel(address) as channel:
            reply = rpc.InferenceStub(channel).Infer(
                pb.InferRequest(request_id="1", encoding=pb.ENCODING_RAW_RGB, frame=frame), timeout=10
            )
        assert reply.node == f"py{version}" and reply.timing.board_total_us > 0
    finally:
        _terminate(agent)
    assert "Traceback" not in log.read_text(errors="replace"), log.read_text(errors="replace")

    tests = run(
        venv, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *AGENT_UNIT_TESTS, "-m", "not slow"
    )
    assert tests.returncode == 0, (tests.stdout + tests.stderr)[-3000:]
