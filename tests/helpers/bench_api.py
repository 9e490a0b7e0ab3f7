"""``npudure bench openloop`` through one of the scheduler's other front doors (its HTTP API, its zmq
endpoint), checked as every one is: the integration tests of each add what only theirs shows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from helpers.cli import run_npudure


def openloop_through(target: str, out: Path, api: str, *options: str) -> tuple[dict[str, Any], Path]:
    """``npudure bench openloop --api API OPTIONS`` at 10 inf/s (--quick) into ``out``: every request it
    sent answered, the API named in the manifest and in the run. The manifest and the one run's folder."""
    proc = run_npudure(
        "bench", "openloop", "--target", target, "--rates", "10", "--quick",
        "--api", api, *options,
        "--out", str(out), "--progress", "quiet",
        timeout_s=240,
    )  # fmt: skip
    # 3 = runs marked invalid: on this shared 2-core machine other work may saturate the host, which
    # the harness rightly refuses to count; the API itself must still have served every request.
    assert proc.returncode in (0, 3), proc.stderr[-2000:]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["settings"]["api"] == api
    (run,) = (out / "runs").iterdir()
    record = json.loads((run / "run.json").read_text())
    assert record["load_target"]["api"] == api
    assert record["responses_ok_total"] >= 10 and record["responses_ok_total"] == record["samples_total"]
    return manifest, run
