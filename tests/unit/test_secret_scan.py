"""No secret in the repository, in code or in prose (the reference's scanner missed prose)."""

import importlib.util

import pytest
from helpers.cli import ROOT

spec = importlib.util.spec_from_file_location("secret_scan", ROOT / "scripts" / "secret_scan.py")
scan = importlib.util.module_from_spec(spec)
spec.loader.exec_module(scan)


@pytest.mark.parametrize(
    "text",
    [
        "The board's root password is hunter22 for now.",  # secret-scan: allow
        "db_password = 'S3cretValue'",  # secret-scan: allow
        "api_key: abcdef123456",  # secret-scan: allow
        "-----BEGIN OPENSSH PRIVATE KEY-----",  # secret-scan: allow
        "token=ghp_abcdefghijklmnopqrstuvwxyz0123456789",  # secret-scan: allow
    ],
)
def test_scanner_catches_secrets_in_code_and_prose(text: str) -> None:
    assert scan.scan_text(text), text


def test_code_that_reads_a_secret_is_not_a_secret() -> None:
    assert scan.scan_text("token = read_token(config.admin.token_file)", "x.py") == []
    assert scan.scan_text("token = 'abcdef123456789'", "x.py")  # secret-scan: allow


@pytest.mark.parametrize(
    "text",
    [
        "ansible_become_password: '{{ vault_become_password }}'",
        "The password is never stored in the repository.",
        "token: null",
    ],
)
def test_scanner_leaves_honest_text_alone(text: str) -> None:
    assert scan.scan_text(text) == []
