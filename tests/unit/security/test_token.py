"""The admin token file: permissions, length, and systemd's credential folder in its path."""

from __future__ import annotations

from pathlib import Path

import pytest

from npudure.security import access as security


def test_a_written_token_reads_back(tmp_path: Path) -> None:
    path = security.write_token(tmp_path / "t")
    assert len(security.read_token(str(path))) >= 16


def test_a_token_others_can_read_is_refused(tmp_path: Path) -> None:
    path = security.write_token(tmp_path / "t")
    path.chmod(0o644)
    with pytest.raises(security.SecurityError, match="readable by others: chmod 600"):
        security.read_token(str(path))


def test_the_credentials_directory_in_the_path_is_expanded(tmp_path: Path, monkeypatch) -> None:
    token = security.write_token(tmp_path / "admin-token")
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(tmp_path))
    assert security.read_token("${CREDENTIALS_DIRECTORY}/admin-token") == token.read_text().strip()


def test_an_unset_variable_in_the_path_says_how_systemd_sets_it(monkeypatch) -> None:
    monkeypatch.delenv("CREDENTIALS_DIRECTORY", raising=False)
    with pytest.raises(security.SecurityError, match="LoadCredential=admin-token"):
        security.read_token("${CREDENTIALS_DIRECTORY}/admin-token")
