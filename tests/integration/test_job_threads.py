"""JobThreads' daemon threads in a real process: one that never stops them still exits (moved from
tests/unit: it starts a Python)."""

from __future__ import annotations


def test_a_process_that_never_stops_its_threads_still_exits() -> None:
    """An agent that fails before serving (its port in use) never reaches ``WorkerPool.close``: the
    threads started with the pool must not keep it alive."""
    import subprocess
    import sys

    code = "from npudure.agent.job_threads import JobThreads\nt = JobThreads('npu0')\nt.call(lambda: None)\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=10)
    assert proc.returncode == 0, proc.stderr
