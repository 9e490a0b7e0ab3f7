"""An agent's CPU (% of one core) and RSS from /proc/PID/stat samples, over a run's window."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from npudure_workshop.bench.proc_usage import CLOCK_TICKS, PAGE_BYTES, ProcSample, ProcSampler, read, usage


def write_stat(root: Path, pid: int, utime: int, stime: int, rss_pages: int, comm: str = "python") -> None:
    fields = ["S", "1", "1", "1", "0", "-1", "4194560", "0", "0", "0", "0", str(utime), str(stime)]
    fields += ["0", "0", "20", "0", "5", "0", "100", "1000", str(rss_pages), "0"]
    (root / str(pid)).mkdir(parents=True, exist_ok=True)
    (root / str(pid) / "stat").write_text(f"{pid} ({comm}) {' '.join(fields)}\n")


def test_reads_cpu_and_rss_even_when_the_name_has_spaces_and_parentheses(tmp_path: Path) -> None:
    write_stat(tmp_path, 42, utime=3 * CLOCK_TICKS, stime=CLOCK_TICKS, rss_pages=256, comm="npu (agent) 1")
    assert read(42, tmp_path) == (pytest.approx(4.0), 256 * PAGE_BYTES)
    assert read(43, tmp_path) is None


def test_reads_this_process() -> None:
    reading = read(os.getpid())
    assert reading is not None and reading[0] > 0 and reading[1] > 0


def test_usage_over_a_window_uses_the_samples_inside_it() -> None:
    samples = [
        ProcSample(9.0, 0.0, 100 * 2**20),  # before the window: the warm-up
        ProcSample(10.0, 1.0, 200 * 2**20),
        ProcSample(12.0, 2.0, 300 * 2**20),
        ProcSample(14.0, 3.0, 250 * 2**20),
        ProcSample(15.0, 9.0, 900 * 2**20),  # after: the drain
    ]
    got = usage(samples, 10.0, 14.0)
    assert got.cpu_pct_of_core == pytest.approx(50.0)  # 2 CPU-s over 4 s
    assert got.rss_max_mib == pytest.approx(300.0)


def test_a_window_with_fewer_than_two_samples_has_no_figure() -> None:
    got = usage([ProcSample(10.0, 1.0, 1)], 9.0, 11.0)
    assert (got.cpu_pct_of_core, got.rss_max_mib) == (None, None)


def test_the_sampler_samples_until_stopped(tmp_path: Path) -> None:
    write_stat(tmp_path, 7, utime=10, stime=0, rss_pages=1)
    sampler = ProcSampler(7, interval_s=0.01, proc_root=tmp_path).start()
    sampler.stop()
    assert sampler.samples and sampler.samples[0].cpu_s == pytest.approx(10 / CLOCK_TICKS)
