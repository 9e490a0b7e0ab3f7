"""Per-board memory and CPU from the board's cgroups (fake v1 and v2 trees)."""

from __future__ import annotations

from pathlib import Path

import pytest

from npudure_workshop.lab import footprint


def test_v1_rss_excludes_page_cache_and_v2_reads_anon(tmp_path: Path) -> None:
    v1 = tmp_path / "v1" / "memory" / "npudure-lab" / "board1"
    v1.mkdir(parents=True)
    (v1 / "memory.stat").write_text("cache 900000000\ntotal_rss 20971520\ntotal_mapped_file 1048576\n")
    assert footprint._rss_bytes("board1", tmp_path / "v1") == 21 * 2**20
    v2 = tmp_path / "v2" / "npudure-lab" / "board1"
    v2.mkdir(parents=True)
    (v2 / "memory.stat").write_text("anon 10485760\nfile 900000000\nfile_mapped 0\n")
    assert footprint._rss_bytes("board1", tmp_path / "v2") == 10 * 2**20
    assert footprint._rss_bytes("board9", tmp_path / "v2") is None


def test_cpu_time_from_cpuacct_or_cpu_stat(tmp_path: Path) -> None:
    v1 = tmp_path / "v1" / "cpuacct" / "npudure-lab" / "board1"
    v1.mkdir(parents=True)
    (v1 / "cpuacct.usage").write_text("2500000000\n")
    assert footprint._cpu_s("board1", tmp_path / "v1") == pytest.approx(2.5)
    v2 = tmp_path / "v2" / "npudure-lab" / "board1"
    v2.mkdir(parents=True)
    (v2 / "cpu.stat").write_text("usage_usec 1500000\nuser_usec 1000000\n")
    assert footprint._cpu_s("board1", tmp_path / "v2") == pytest.approx(1.5)
    assert footprint._cpu_s("board9", tmp_path / "v2") is None
