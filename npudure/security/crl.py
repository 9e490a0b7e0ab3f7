"""The fleet's certificate revocation list: ``npudure pki revoke`` on the controller, read by the services.

The CRL (``crl.pem``) lives in the CA folder beside ``ca.crt`` and is signed by the CA key, so a host
can check that it came from the CA it trusts. The services refuse a peer whose certificate serial is
listed (npudure.security.revocation); an absent file means nothing is revoked.

Revoking is idempotent: a serial already listed is not added again, and the file is left as it is
unless its ``next_update`` is near (then it is re-signed with a new one).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization

from npudure.security import pki
from npudure.security.access import SecurityError

log = logging.getLogger(__name__)

CRL_NAME = "crl.pem"
DEFAULT_CRL_DAYS = 365
# A CRL with fewer days than this before its next_update is re-signed by the next revoke, even of a
# serial already listed.
RENEW_DAYS = 30


@dataclass(frozen=True)
class Revoked:
    crl: Path
    serial: int
    added: bool  # False: the serial was listed already
    written: bool  # False: the file was left as it was
    count: int  # serials listed now
    next_update: dt.datetime


def parse_serial(text: str) -> int:
    """A serial as ``openssl x509 -serial`` prints it (hex, ``serial=`` and colons allowed) or ``0x...``."""
    value = text.strip().lower().removeprefix("serial=").removeprefix("0x").replace(":", "")
    if not value or not re.fullmatch(r"[0-9a-f]+", value):
        raise pki.PkiError(
            f"serial {text!r} is not a hexadecimal number (as openssl x509 -noout -serial prints)"
        )
    return int(value, 16)


def serial_text(serial: int) -> str:
    return f"{serial:X}"


def load_crl(path: Path) -> x509.CertificateRevocationList:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise pki.PkiError(f"cannot read the CRL {path}: {exc.strerror}") from None
    try:
        return x509.load_pem_x509_crl(data)
    except ValueError:
        raise pki.PkiError(f"the CRL {path} is not a PEM CRL (expected '-----BEGIN X509 CRL-----')") from None


def signed_by_any(crl: x509.CertificateRevocationList, cas: list[x509.Certificate]) -> bool:
    """Whether one of ``cas`` (a trust file may hold the old and the new CA during a rotation) signed it."""
    for ca in cas:
        if crl.issuer != ca.subject:
            continue
        try:
            if crl.is_signature_valid(ca.public_key()):  # type: ignore[arg-type]  # CA keys are EC/RSA
                return True
        except (TypeError, ValueError):
            continue
    return False


def revoke(
    ca_dir: str | os.PathLike[str],
    cert: str | os.PathLike[str] | None = None,
    serial: str | None = None,
    days: int = DEFAULT_CRL_DAYS,
    now: dt.datetime | None = None,
) -> Revoked:
    """List a certificate (its file, which must be issued by this CA, or its serial) on the CA's CRL."""
    if (cert is None) == (serial is None):
        raise pki.PkiError("name the certificate to revoke: --cert FILE or --serial HEX (one of them)")
    if days < 1:
        raise pki.PkiError(f"--days must be at least 1 (got {days})")
    ca_dir = Path(ca_dir)
    key_path, cert_path = ca_dir / pki.CA_KEY, ca_dir / pki.CA_CERT
    for p in (key_path, cert_path):
        if not p.exists():
            raise pki.PkiError(f"{p} does not exist: --ca-dir must be the fleet's CA folder (ca.key, ca.crt)")
    problem = pki._ca_problem(key_path, cert_path)
    if problem:
        raise pki.PkiError(f"cannot revoke with the CA in {ca_dir}: {problem}")
    ca_cert = pki.load_certificate(cert_path, "CA certificate")
    ca_key = pki.load_private_key(key_path, "CA key")

    if cert is not None:
        leaf = pki.load_certificate(cert)
        try:
            leaf.verify_directly_issued_by(ca_cert)
        except Exception:  # InvalidSignature, ValueError (names differ), TypeError (key types)
            raise pki.PkiError(
                f"{cert} was not issued by the CA in {ca_dir}: it cannot be revoked there "
                "(a certificate of another CA is not trusted by this fleet anyway)"
            ) from None
        number = leaf.serial_number
    else:
        assert serial is not None
        number = parse_serial(serial)

    now = now or dt.datetime.now(dt.UTC)
    crl_path = ca_dir / CRL_NAME
    entries: dict[int, dt.datetime] = {}
    old_next: dt.datetime | None = None
    if crl_path.exists():
        current = load_crl(crl_path)
        if not signed_by_any(current, [ca_cert]):
            raise pki.PkiError(
                f"{crl_path} is not signed by the CA in {ca_dir} (left from a former CA?): every certificate "
                "it listed is untrusted with that CA; move it aside and revoke again"
            )
        entries = {e.serial_number: e.revocation_date_utc for e in current}
        old_next = current.next_update_utc
    added = number not in entries
    fresh = old_next is not None and old_next - now > dt.timedelta(days=RENEW_DAYS)
    if not added and fresh:
        assert old_next is not None
        return Revoked(crl_path, number, False, False, len(entries), old_next)
    entries.setdefault(number, now)

    next_update = now + dt.timedelta(days=days)
    builder = (
        x509.CertificateRevocationListBuilder()
        .issuer_name(ca_cert.subject)
        .last_update(now - pki.CLOCK_SKEW)
        .next_update(next_update)
    )
    for listed, when in sorted(entries.items()):
        builder = builder.add_revoked_certificate(
            x509.RevokedCertificateBuilder().serial_number(listed).revocation_date(when).build()
        )
    signed = builder.sign(ca_key, hashes.SHA256())
    pki._write_atomic(crl_path, signed.public_bytes(serialization.Encoding.PEM), 0o644)
    return Revoked(crl_path, number, added, True, len(entries), next_update)


# ---------------------------------------------------------------------- the services' side
class CrlError(SecurityError):
    """The CRL a service is configured with cannot be used (a start-up or reload error)."""


def read_revoked(crl_path: str | os.PathLike[str], ca_path: str | os.PathLike[str]) -> frozenset[int]:
    """The serials the CRL at ``crl_path`` lists, checked to be signed by a CA in ``ca_path``; an absent
    file lists none."""
    path = Path(crl_path)
    if not path.exists():
        return frozenset()
    try:
        crl = load_crl(path)
    except pki.PkiError as exc:
        raise CrlError(str(exc)) from None
    try:
        cas = x509.load_pem_x509_certificates(Path(ca_path).read_bytes())
    except (OSError, ValueError) as exc:
        raise CrlError(f"cannot read the CA certificate {ca_path} to check the CRL {path}: {exc}") from None
    if not signed_by_any(crl, cas):
        raise CrlError(
            f"the CRL {path} is not signed by the CA in {ca_path}: copy the fleet's crl.pem from the "
            "controller's CA folder (npudure pki revoke writes it)"
        )
    next_update = crl.next_update_utc
    if next_update is not None and next_update < dt.datetime.now(dt.UTC):
        # Still applied: ignoring it would let every revoked certificate back in.
        log.warning(
            "the CRL %s is past its next update (%s): re-sign it with npudure pki revoke on the controller",
            path,
            f"{next_update:%Y-%m-%d}",
        )
    return frozenset(entry.serial_number for entry in crl)


def default_crl_path(ca_path: str) -> str:
    """Where a service looks for the CRL when its config names none: beside its CA file."""
    return str(Path(ca_path).parent / CRL_NAME)
