"""Refusing more contexts than MemAvailable holds, with the figures."""

from __future__ import annotations

from pathlib import Path

import pytest

from npudure.backends import create_backend, memory
from npudure.config import AgentConfig

MiB = memory.MiB


def _meminfo(tmp_path: Path, available_kb: int | None) -> str:
    path = tmp_path / "meminfo"
    line = f"MemAvailable:   {available_kb} kB\n" if available_kb is not None else ""
    path.write_text(f"MemTotal:        8000000 kB\nMemFree:          100000 kB\n{line}Buffers: 1 kB\n")
    return str(path)


def test_mem_available_reads_the_line_in_bytes(tmp_path: Path) -> None:
    assert memory.mem_available(_meminfo(tmp_path, 2048)) == 2 * MiB
    assert memory.mem_available(_meminfo(tmp_path, None)) is None
    assert memory.mem_available(str(tmp_path / "missing")) is None
    assert memory.rss_bytes() > 0  # this is Linux


def test_a_count_that_fits_passes_and_one_that_does_not_names_the_figures(tmp_path: Path) -> None:
    meminfo = _meminfo(tmp_path, 100 * 1024)  # 100 MiB
    memory.check(10, 10 * MiB, "stated", meminfo=meminfo)  # exactly fits
    with pytest.raises(memory.ContextMemoryError) as info:
        memory.check(11, 10 * MiB, "stated", meminfo=meminfo)
    assert str(info.value) == (
        f"11 contexts need 11 x 10 MiB (stated) = 110 MiB, but MemAvailable is 100 MiB ({meminfo}): "
        "set contexts to 10 or fewer"
    )
    # Contexts already made are in use already: only the rest must fit.
    memory.check(11, 10 * MiB, "measured", made=1, meminfo=meminfo)
    with pytest.raises(memory.ContextMemoryError, match="1 already made"):
        memory.check(12, 10 * MiB, "measured", made=1, meminfo=meminfo)
    with pytest.raises(memory.ContextMemoryError, match="free memory or use a smaller model"):
        memory.check(1, 200 * MiB, "stated", meminfo=meminfo)
    memory.check(64, 1 << 40, "stated", meminfo=_meminfo(tmp_path, None))  # not Linux: no check


def test_the_sim_states_its_figure_and_is_refused_beyond_memory(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(memory, "MEMINFO", _meminfo(tmp_path, 20 * 1024))  # 20 MiB: 5 sim contexts
    config = AgentConfig(node_name="b", backend="sim", contexts=6)
    with pytest.raises(
        memory.ContextMemoryError, match=r"6 contexts need 6 x 4 MiB \(the sim's stated figure\)"
    ):
        create_backend(config)
    assert len(create_backend(config, contexts=5).contexts) == 5
