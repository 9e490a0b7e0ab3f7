"""``npudure bench contexts`` end to end on the sim backend: agents and schedulers started by the harness
for each count, a short window; the table, the operating point line and the result folder. No figure
is asserted (the host is shared: runs may well be marked invalid), only that each is there."""

from __future__ import annotations

import json
from pathlib import Path

from helpers.cli import run_npudure

from npudure_workshop.bench.results import read_csv


def test_a_short_sweep_prints_its_table_and_operating_point_and_writes_its_folder(tmp_path: Path) -> None:
    out = tmp_path / "contexts"
    done = run_npudure(
        "bench", "contexts", "--contexts", "2", "--time-scale", "2", "--warmup", "0.5", "--duration", "2",
        "--frames", "2", "--progress", "lines", "--out", str(out), timeout_s=180,
    )  # fmt: skip
    assert done.returncode in (0, 3), done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("conditions: backend sim (EMULATED NPU") and "time scale 2" in lines[0]
    assert "(contexts->outstanding: 2->4, 8->16)" in done.stdout and "host " in done.stdout
    header = next(i for i, line in enumerate(lines) if line.startswith("contexts "))
    rows = [line.split() for line in lines[header + 2 : header + 6]]
    # A count the agent did not apply reads "8 (agent ran 2)" (an agent without the context pool).
    assert [r[0] for r in rows] == ["2", "2", "8", "8"]
    assert [next(w for w in r if w in ("agent", "scheduler")) for r in rows] == ["agent", "scheduler"] * 2
    assert any(line.startswith("operating point (straight at the agent): ") for line in lines)
    assert any(line.startswith("operating point (through the scheduler): ") for line in lines)

    summary = json.loads((out / "summary.json").read_text())
    assert [p["contexts"] for p in summary["points"]] == [2, 8]
    assert set(summary["operating_point"]) == {"agent", "scheduler"}
    table = read_csv(out / "contexts.csv")
    assert len(table) == 4 and all(float(row["agent_rss_max_mib"]) > 0 for row in table)
    assert all(row["agent_cpu_pct_of_core"] for row in table)
    for n in (2, 8):  # each count is a complete bench result folder
        assert (out / f"contexts-{n}" / "summary.json").is_file()
        assert len(list((out / f"contexts-{n}" / "runs").iterdir())) == 2
        assert (out / "agents" / f"contexts-{n}.log").is_file()
    assert "operating point" in (out / "report.md").read_text()
