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


def _token_file(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o600)
    return path


def test_a_file_of_several_tokens_sends_the_first_and_accepts_all(tmp_path: Path) -> None:
    old, new = "o" * 32, "n" * 32
    path = _token_file(
        tmp_path / "t", f"# rotation: new first once every service accepts it\n{new}\n\n{old}\n"
    )
    assert security.read_tokens(str(path)) == [new, old]
    assert security.read_token(str(path)) == new


def test_every_token_must_be_long(tmp_path: Path) -> None:
    path = _token_file(tmp_path / "t", "n" * 32 + "\nshort\n")
    with pytest.raises(security.SecurityError, match=r"admin token 2 in .* shorter than 16"):
        security.read_tokens(str(path))
    with pytest.raises(security.SecurityError, match="holds no token"):
        security.read_tokens(str(_token_file(tmp_path / "e", "# nothing yet\n")))


class _Context:
    """What AdminGuard reads from a gRPC servicer context."""

    def __init__(self, token: str | None) -> None:
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()

    def invocation_metadata(self):
        return self._metadata

    def auth_context(self):
        return {}


def test_the_guard_accepts_old_and_new_during_a_rotation_and_nothing_else(tmp_path: Path) -> None:
    from npudure.config import AdminConfig

    old, new = "o" * 32, "n" * 32
    path = _token_file(tmp_path / "t", f"{old}\n{new}\n")
    guard = security.AdminGuard(AdminConfig(token_file=str(path)), None)
    assert guard.allows(_Context(old)) and guard.allows(_Context(new))
    assert not guard.allows(_Context("x" * 32)) and not guard.allows(_Context(None))
    single = security.AdminGuard(AdminConfig(token_file=str(_token_file(tmp_path / "s", new + "\n"))), None)
    assert single.allows(_Context(new)) and not single.allows(_Context(old))


class _Sent(_Context):
    """A call carrying several authorization entries (the reload command sends its file's tokens)."""

    def __init__(self, *tokens: str) -> None:
        self._metadata = tuple(("authorization", f"Bearer {t}") for t in tokens)


def test_a_call_with_several_tokens_is_allowed_when_one_matches_among_the_first_few(tmp_path: Path) -> None:
    from npudure.config import AdminConfig

    known, other = "k" * 32, "x" * 32
    guard = security.AdminGuard(AdminConfig(token_file=str(_token_file(tmp_path / "t", known + "\n"))), None)
    assert guard.allows(_Sent(other, known)) and guard.allows(_Sent(known, other))
    assert not guard.allows(_Sent(other, other))
    # Only the first MAX_SENT_TOKENS are looked at: a long list of guesses is not a faster brute force.
    assert not guard.allows(_Sent(*[other] * security.MAX_SENT_TOKENS, known))


def test_reloaded_tokens_take_effect_in_place_and_a_bad_file_keeps_the_current_ones(tmp_path: Path) -> None:
    from npudure.config import AdminConfig

    old, new = "o" * 32, "n" * 32
    path = _token_file(tmp_path / "t", old + "\n")
    tokens = security.AdminTokens(str(path))
    guard = security.AdminGuard(AdminConfig(token_file=str(path)), None, tokens)
    _token_file(path, f"{new}\n{old}\n")
    assert not guard.allows(_Context(new))  # the file alone changes nothing: a reload does
    assert tokens.reload() == 2 and tokens.first == new
    assert guard.allows(_Context(new)) and guard.allows(_Context(old)) and guard.token == new
    _token_file(path, "# emptied by mistake\n")
    with pytest.raises(security.SecurityError, match="holds no token"):
        tokens.reload()
    assert guard.tokens == [new, old]
    _token_file(path, new + "\n").chmod(0o644)
    with pytest.raises(security.SecurityError, match="readable by others"):
        tokens.reload()
    assert guard.allows(_Context(old))
