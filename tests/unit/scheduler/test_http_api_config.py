"""The HTTP API's configuration: off unless configured, where it listens, its key file."""

from __future__ import annotations

from pathlib import Path

import pytest

from npudure import config as cfg
from npudure.scheduler.http_api import HttpApiError, _min_confidence, http_address, read_api_key
from npudure.security.access import SecurityError

BOARDS = {"boards": [{"name": "b1", "address": "10.0.0.2:50051"}]}


def test_off_by_default_and_on_the_scheduler_host_when_on() -> None:
    assert cfg.parse(cfg.SchedulerConfig, BOARDS, "s.yml").http_api is None
    on = cfg.parse(cfg.SchedulerConfig, {**BOARDS, "listen": "10.0.0.1:50050", "http_api": {}}, "s.yml")
    assert on.http_api is not None and http_address(on, on.http_api) == ("10.0.0.1", 50080)
    there = cfg.HttpApiConfig(listen="127.0.0.1:5000")
    assert http_address(on, there) == ("127.0.0.1", 5000)


def test_bad_fields_are_named() -> None:
    with pytest.raises(cfg.ConfigError, match=r"http_api.listen.*not host:port"):
        cfg.parse(cfg.SchedulerConfig, {**BOARDS, "http_api": {"listen": "nowhere"}}, "s.yml")
    with pytest.raises(cfg.ConfigError, match=r"http_api.max_concurrency"):
        cfg.parse(cfg.SchedulerConfig, {**BOARDS, "http_api": {"max_concurrency": 0}}, "s.yml")


def test_api_key_file(tmp_path: Path) -> None:
    assert read_api_key(None) is None
    (tmp_path / "key").write_text("  sekrit\n")
    assert read_api_key(str(tmp_path / "key")) == "sekrit"
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(SecurityError, match="is empty"):
        read_api_key(str(tmp_path / "empty"))
    with pytest.raises(SecurityError, match="cannot read"):
        read_api_key(str(tmp_path / "missing"))


@pytest.mark.parametrize(("value", "expected"), [(None, 0.4), ("", 0.4), ("0.65", 0.65), ("1", 1.0)])
def test_min_confidence(value: str | None, expected: float) -> None:
    assert _min_confidence(value) == expected


@pytest.mark.parametrize("value", ["-0.1", "1.5", "nan", "high"])
def test_min_confidence_out_of_range(value: str) -> None:
    with pytest.raises(HttpApiError, match="0 to 1"):
        _min_confidence(value)
