"""The layers are a checked contract (import-linter, `make lint`): the runtime never imports the
controller's workshop, and the agent and the scheduler stay apart. The checker is also shown to fail
on a contract this tree breaks, so a passing run means something."""

from __future__ import annotations

import subprocess
from pathlib import Path

from helpers.ansible import BIN, ROOT


def _lint_imports(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "lint-imports"), *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


def test_the_trees_layers_hold() -> None:
    done = _lint_imports()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "2 kept, 0 broken" in done.stdout


def test_a_broken_layer_is_caught(tmp_path: Path) -> None:
    config = tmp_path / "broken.toml"
    config.write_text(
        '[tool.importlinter]\nroot_packages = ["npudure", "npudure_workshop"]\n\n'
        "[[tool.importlinter.contracts]]\n"
        'name = "the bench never imports the backends (false: it names the emulator\'s calibration)"\n'
        'type = "forbidden"\nsource_modules = ["npudure_workshop.bench"]\n'
        'forbidden_modules = ["npudure.backends"]\n'
    )
    done = _lint_imports("--config", str(config))
    assert done.returncode != 0 and "BROKEN" in done.stdout, done.stdout[-2000:]
