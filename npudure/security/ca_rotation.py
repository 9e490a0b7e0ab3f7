"""A CA rotation on the controller in three phases, each re-runnable: start, switch, finish.

The controller's CA folder (``npudure_tls_ca_dir``) during and after a rotation::

    ca.key, ca.crt           the fleet CA (signs until the switch)
    next/ca.key, next/ca.crt the new CA (start .. finish)
    next/phase               "start" or "switch": how far the rotation went
    trust.crt                what hosts and clients trust: the bundle of both CAs in the window,
                             the new CA alone after finish; the first CA in it is the one that issues
    retired/<when>/          the old CA, kept after finish

start makes the new CA and the bundle (old first: nothing is re-issued); switch puts the new CA first
(every certificate not signed by it is re-issued from it, both still trusted); finish makes the new
CA the fleet's (bundle = new alone) and retires the old one. The playbook rolls the fleet after each.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from npudure.security import crl, pki

Phase = Literal["start", "switch", "finish"]
PHASES: tuple[Phase, ...] = ("start", "switch", "finish")
NEXT, PHASE_FILE, TRUST, RETIRED = "next", "phase", "trust.crt", "retired"
_PLAY = "playbooks/rotate-ca.yml -e npudure_ca_rotation="


@dataclass(frozen=True)
class Step:
    changed: bool
    message: str


def current_phase(ca_dir: str | os.PathLike[str]) -> str | None:
    """The phase a rotation reached ("start", "switch"), or None when none is under way."""
    path = Path(ca_dir) / NEXT / PHASE_FILE
    try:
        phase = path.read_text().strip()
    except FileNotFoundError:
        return None
    if phase not in ("start", "switch"):
        raise pki.PkiError(f"{path} says {phase!r}, expected start or switch: fix or remove it")
    return phase


def trusted(ca_dir: str | os.PathLike[str]) -> list[Path]:
    """The CA certificates to trust now, the one that issues first."""
    ca_dir = Path(ca_dir)
    old, new = ca_dir / pki.CA_CERT, ca_dir / NEXT / pki.CA_CERT
    phase = current_phase(ca_dir)
    if phase == "start":
        return [old, new]
    if phase == "switch":
        return [new, old]
    return [old]


def advance(ca_dir: str | os.PathLike[str], phase: str, now: dt.datetime | None = None) -> Step:
    """Run ``phase`` on the controller's CA folder; PkiError (one line, with what to run) out of order."""
    ca_dir = Path(ca_dir)
    if phase not in PHASES:
        raise pki.PkiError(f"unknown phase {phase!r}: start, switch or finish")
    if not (ca_dir / pki.CA_CERT).exists() or not (ca_dir / pki.CA_KEY).exists():
        raise pki.PkiError(
            f"there is no fleet CA in {ca_dir} (ca.crt, ca.key) to rotate: turn TLS on and run site.yml first"
        )
    now = now or dt.datetime.now(dt.UTC)
    at = current_phase(ca_dir)
    if phase == "start":
        return _start(ca_dir, at, now)
    if phase == "switch":
        if at is None:
            raise pki.PkiError(f"no CA rotation is under way: start one first ({_PLAY}start)")
        return _switch(ca_dir, at)
    return _finish(ca_dir, at, now)


def _start(ca_dir: Path, at: str | None, now: dt.datetime) -> Step:
    if at == "switch":
        raise pki.PkiError(
            f"the rotation is past its start (the certificates are switched): finish it ({_PLAY}finish)"
        )
    made = pki.make_ca(ca_dir / NEXT, cn=f"{pki.DEFAULT_CA_CN} {now:%Y-%m-%d}")
    changed = _write_phase(ca_dir, "start") | _write_trust(ca_dir) | made.changed
    what = f"new CA {made.cert}" + (" made" if made.changed else " kept")
    return Step(changed, f"{what}; {ca_dir / TRUST} trusts the old and the new CA, the old one issues")


def _switch(ca_dir: Path, at: str) -> Step:
    problem = pki._ca_problem(ca_dir / NEXT / pki.CA_KEY, ca_dir / NEXT / pki.CA_CERT)
    if problem:
        raise pki.PkiError(f"the new CA cannot issue: {problem}")
    changed = _write_phase(ca_dir, "switch") | _write_trust(ca_dir)
    return Step(changed, f"{ca_dir / TRUST} trusts both CAs; the new one ({ca_dir / NEXT}) issues")


def _finish(ca_dir: Path, at: str | None, now: dt.datetime) -> Step:
    if at == "start":
        raise pki.PkiError(
            f"the certificates are not switched to the new CA yet: switch first ({_PLAY}switch)"
        )
    if at is None:
        retired = ca_dir / RETIRED
        if retired.is_dir() and any(retired.iterdir()):
            changed = _write_trust(ca_dir)
            return Step(
                changed, f"no CA rotation under way: the last one is finished ({ca_dir / pki.CA_CERT})"
            )
        raise pki.PkiError(f"no CA rotation is under way: start one first ({_PLAY}start)")
    nxt = ca_dir / NEXT
    # The old CA is copied away before anything moves: a crash at any point leaves it on disk.
    keep = ca_dir / RETIRED / f"{now:%Y%m%dT%H%M%SZ}"
    keep.mkdir(parents=True, exist_ok=True, mode=0o700)
    for name in (pki.CA_KEY, pki.CA_CERT):
        shutil.copy2(ca_dir / name, keep / name)
    # The old CA's CRL retires with it: what it lists was issued by a CA no host trusts any more, and a
    # CRL the new CA did not sign stops the services at start (the tls role removes the hosts' copies).
    if (ca_dir / crl.CRL_NAME).exists():
        os.replace(ca_dir / crl.CRL_NAME, keep / crl.CRL_NAME)
    # A crash between these two leaves a pair that init-ca and sign report as mismatched ("does not
    # belong"); the old CA is then in retired/ and the new key still in next/.
    os.replace(nxt / pki.CA_CERT, ca_dir / pki.CA_CERT)
    os.replace(nxt / pki.CA_KEY, ca_dir / pki.CA_KEY)
    (nxt / PHASE_FILE).unlink()
    nxt.rmdir()
    _write_trust(ca_dir)
    return Step(True, f"the new CA is the fleet's ({ca_dir / pki.CA_CERT}); the old one is kept in {keep}")


def _write_phase(ca_dir: Path, phase: str) -> bool:
    path = ca_dir / NEXT / PHASE_FILE
    if path.exists() and path.read_text().strip() == phase:
        return False
    pki._write_atomic(path, f"{phase}\n".encode(), 0o600)
    return True


def _write_trust(ca_dir: Path) -> bool:
    """trust.crt = the CAs to trust now, the issuing one first; False when it already says that."""
    data = b"".join(_pem(p) for p in trusted(ca_dir))
    path = ca_dir / TRUST
    if path.exists() and path.read_bytes() == data:
        return False
    pki._write_atomic(path, data, 0o644)
    return True


def _pem(path: Path) -> bytes:
    data = path.read_bytes()
    return data if data.endswith(b"\n") else data + b"\n"
