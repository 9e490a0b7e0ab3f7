#!/usr/bin/env python3
"""Scan every tracked file — code AND prose — for secrets.

The reference's scanner looked only at code and missed a password written in a document; this one
reads Markdown, YAML, templates and text the same way as code.
Usage: scripts/secret_scan.py [PATH ...]   (default: every file `git ls-files` lists)
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("private key", re.compile(r"-----BEGIN (?:RSA |EC |OPENSSH |DSA |ENCRYPTED )?PRIVATE KEY-----")),
    ("AWS access key", re.compile(r"\bAKIA[0-9A-Z]{16}\b")),
    ("GitHub token", re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}\b")),
    ("Slack token", re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}\b")),
    # key = value / key: value with a secret-ish key and a literal value (code, YAML, ini).
    (
        "secret assignment",
        re.compile(
            r"(?i)(?:\b|_)(?:password|passwd|pwd|secret|api[_-]?key|token|private[_-]?key)\b[\"']?\s*[:=]\s*"
            r"[\"']?(?!\{\{|\$\{|<|\*+|none\b|null\b|false\b|true\b|changeme\b|\"?$)([^\s\"',;#]{6,})"
        ),
    ),
    # Prose: "the password is hunter22", "password for the board: s3cr3t!".  secret-scan: allow
    (
        "secret in prose",
        re.compile(
            r"(?i)\b(?:password|passphrase|passwd)\b[^.\n]{0,30}?\b(?:is|was|=|:)\s+[\"'`]?([^\s\"'`]{6,})"
        ),
    ),
]
# Words that follow "password is" in honest documentation.
ALLOWED_VALUES = {
    "required",
    "optional",
    "missing",
    "stored",
    "needed",
    "prompted",
    "vaulted",
    "encrypted",
    "never",
}
SKIP_SUFFIXES = {".png", ".jpg", ".jpeg", ".onnx", ".rknn", ".npz", ".whl", ".so", ".gz"}


def _quoted(line: str, match: re.Match[str]) -> bool:
    start = match.start(match.lastindex or 0)
    return start > 0 and line[start - 1] in "\"'"


def scan_text(text: str, path: str = "<text>") -> list[str]:
    findings = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if "secret-scan: allow" in line:
            continue
        for name, pattern in PATTERNS:
            match = pattern.search(line)
            if not match:
                continue
            value = match.group(match.lastindex or 0).strip("`'\".,")
            if name == "secret assignment" and path.endswith(".py") and not _quoted(line, match):
                continue  # in code, only a string literal is a secret; `token = read_token(path)` is not
            if value.lower() in ALLOWED_VALUES or value.startswith(("{{", "$", "<", "lookup(", "vault")):
                continue
            findings.append(f"{path}:{lineno}: {name}: {line.strip()[:100]}")
    return findings


def tracked_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z"], capture_output=True, check=True).stdout
    return [Path(p) for p in out.decode().split("\0") if p]


def main(argv: list[str]) -> int:
    paths = [Path(a) for a in argv] or tracked_files()
    findings: list[str] = []
    for path in paths:
        if path.suffix in SKIP_SUFFIXES or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        findings += scan_text(text, str(path))
    for finding in findings:
        print(finding)
    print(f"secret scan: {len(paths)} files, {len(findings)} finding(s)")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
