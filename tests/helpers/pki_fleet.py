"""A small PKI for the TLS tests: one CA with a server certificate for 127.0.0.1, an admin and a viewer
client certificate; a second CA with the SAME name (so only the signature tells them apart) and a
client certificate from it."""

from __future__ import annotations

from pathlib import Path

from npudure.security import pki


def make_fleet(base: Path) -> dict[str, Path | pki.Issued]:
    ca = pki.make_ca(base / "ca")
    other = pki.make_ca(base / "other-ca")
    return {
        "ca_dir": base / "ca",
        "ca": ca.cert,
        "other_ca": other.cert,
        "server": pki.issue(base / "ca", "board1", ["127.0.0.1", "board1.lan"], base / "certs"),
        "admin": pki.issue(base / "ca", "npudure-admin", [], base / "certs", usage="client-only"),
        "viewer": pki.issue(base / "ca", "viewer", [], base / "certs", usage="client-only"),
        "intruder": pki.issue(base / "other-ca", "npudure-admin", [], base / "other", usage="client-only"),
    }
