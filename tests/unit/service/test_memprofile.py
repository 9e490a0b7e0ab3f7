"""The memory profile's switch and its report (tracemalloc snapshots of this very process)."""

from __future__ import annotations

import tracemalloc

import pytest

from npudure.service import memprofile


def test_the_flag_wins_over_the_environment_and_zero_is_off() -> None:
    assert memprofile.interval_from(30.0, {memprofile.ENV: "60"}) == 30.0
    assert memprofile.interval_from(None, {memprofile.ENV: "60"}) == 60.0
    assert memprofile.interval_from(None, {}) is None
    assert memprofile.interval_from(0.0, {}) is None
    with pytest.raises(ValueError, match="is not a number of seconds"):
        memprofile.interval_from(None, {memprofile.ENV: "soon"})


def test_the_report_names_the_line_that_grew() -> None:
    tracemalloc.start()
    try:
        base = memprofile._snapshot()
        kept = [bytearray(4096) for _ in range(256)]  # ~1 MiB held on this line
        now = memprofile._snapshot()
    finally:
        tracemalloc.stop()
    lines = memprofile.report(base, now)
    assert lines[0].startswith("memory profile: traced")
    top = lines[1]  # the biggest grower first
    assert "test_memprofile.py" in top, lines
    assert float(top.split("KiB")[0].split()[-1]) >= 1024, top  # 256 x 4 KiB at least
    assert len(kept) == 256
