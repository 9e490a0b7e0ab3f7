"""Every entry point's error path prints exactly one line on stderr (issue #49).

A warning printed first (cryptography 51's DSA deprecation did, from every command that imports the
PKI module) breaks the promise of one clear line as surely as a traceback does, so these count the
lines rather than look at the last one.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import dsa
from cryptography.utils import CryptographyDeprecationWarning
from helpers.cli import run_npudure

from npudure_workshop.lab.local import free_port


def _dead() -> str:
    return f"127.0.0.1:{free_port()}"


def _dsa_key(folder: Path) -> Path:
    with warnings.catch_warnings():  # the test makes the deprecated key on purpose
        warnings.simplefilter("ignore", CryptographyDeprecationWarning)
        key = dsa.generate_private_key(1024)
        pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    path = folder / "host.key"
    path.write_bytes(pem)
    path.chmod(0o600)
    return path


# (argv with {tmp} for the test's folder, exit code, a phrase the line must hold)
CASES = [
    (["agent", "--config", "{tmp}/no.yml"], 78, "config file not found"),
    (["scheduler", "--config", "{tmp}/no.yml"], 78, "config file not found"),
    (["status", "--target", "{dead}", "--timeout", "1"], 1, "UNAVAILABLE"),
    (["infer", "--target", "{dead}", "--image", "{tmp}/no.jpg"], 2, "no such file"),
    (["admin", "drain", "--target", "{dead}", "--node", "b1", "--timeout", "1"], 4, "not answering"),
    (["model", "info", "{tmp}/no.onnx"], 1, "no such file"),
    (["bench", "run", "--target", "{dead}", "--quick", "--out", "{tmp}/out"], 1, "cannot reach"),
    (["faults", "run", "--faults", "nonsense"], 2, "unknown fault nonsense"),
    (["local", "--workdir", "{tmp}/file/below"], 1, "--workdir"),
    (["pki", "csr", "--key", "{dsa}", "--csr", "{tmp}/host.csr", "--cn", "b1"], 1, "EC (P-256)"),
]


@pytest.mark.parametrize(("argv", "code", "phrase"), CASES, ids=[" ".join(c[0][:2]) for c in CASES])
def test_an_error_path_prints_one_line(tmp_path: Path, argv: list[str], code: int, phrase: str) -> None:
    (tmp_path / "file").write_text("")  # a file where --workdir wants a folder
    fill = {"tmp": str(tmp_path), "dead": _dead()}
    if any("{dsa}" in a for a in argv):
        fill["dsa"] = str(_dsa_key(tmp_path))
    proc = run_npudure(*(a.format(**fill) for a in argv))
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("npudure"), proc.stderr
    assert phrase in lines[0], proc.stderr
