"""npudure/service/handlers.py without a server: the rate-limited warning (a fake monotonic clock).

``wrap`` itself is exercised through its two users on real grpc.aio servers, every handler kind:
tests/integration/test_revocation_interceptor.py (unary, a writer stream) and
tests/integration/test_fuzz_grpc.py (StrictDecoding on Cluster, Node, Health and reflection).
"""

from __future__ import annotations

import logging

import pytest

from npudure.service import handlers


def test_a_warning_at_most_once_per_interval_with_the_count_held_back(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    now = [100.0]
    monkeypatch.setattr(handlers.time, "monotonic", lambda: now[0])
    limited = handlers.RateLimitedLog(logging.getLogger("test.handlers"), every_s=10.0)
    with caplog.at_level(logging.WARNING, logger="test.handlers"):
        for peer in ("a", "b", "c"):
            limited.warn("refused %s", peer)
            now[0] += 1.0
        assert [r.getMessage() for r in caplog.records] == ["refused a"]
        now[0] += 10.0
        limited.warn("refused %s", "d")
        limited.warn("refused %s", "e")  # inside the next interval again
    assert [r.getMessage() for r in caplog.records] == [
        "refused a",
        "refused d (2 more since the last line)",
    ]
    assert limited.suppressed == 1
