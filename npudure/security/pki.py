"""A small CA for the optional mutual TLS: create the CA, make keys and CSRs, sign, check.

Private keys never travel: each host makes its own key and CSR, the controller signs the CSR with
the CA key (which stays on the controller) and sends back only the certificate. ``check`` is what
automation runs to decide whether a certificate must be re-issued, so it reports every problem at
once instead of stopping at the first.

Keys are EC P-256: small, fast to generate on a board, and accepted by gRPC's BoringSSL.
"""

from __future__ import annotations

import datetime as dt
import grp
import ipaddress
import os
import pwd
import stat
import tempfile
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa
from cryptography.hazmat.primitives.asymmetric.types import (
    CertificateIssuerPrivateKeyTypes,
    CertificatePublicKeyTypes,
    PublicKeyTypes,
)
from cryptography.utils import CryptographyDeprecationWarning
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_KEY, CA_CERT = "ca.key", "ca.crt"
DEFAULT_CA_CN = "NPUDure fleet CA"
DEFAULT_CA_DAYS = 3650
DEFAULT_LEAF_DAYS = 365
DEFAULT_MIN_DAYS = 30
# Certificates start a little in the past so a board whose clock lags the controller's accepts them.
CLOCK_SKEW = dt.timedelta(minutes=5)

Usage = Literal["server-and-client", "client-only"]
# Which CA of a bundle must have signed a checked certificate (check_certificate).
Issuer = Literal["any", "first"]
EcKey = ec.EllipticCurvePrivateKey
# What can sign a certificate or a CSR (what load_private_key accepts; npudure makes EcKey ones). DSA
# is left out: cryptography deprecates it (naming its type warns on import) and no fleet key is DSA.
SigningKey = CertificateIssuerPrivateKeyTypes
_SIGNING_KEYS = (
    ec.EllipticCurvePrivateKey,
    rsa.RSAPrivateKey,
    ed25519.Ed25519PrivateKey,
    ed448.Ed448PrivateKey,
)


class PkiError(Exception):
    """A certificate or key problem, worded with the fix."""


# ---------------------------------------------------------------------- files
def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise PkiError(f"{what} {path} does not exist") from None
    except IsADirectoryError:
        raise PkiError(f"{what} {path} is a directory, not a file") from None
    except PermissionError:
        raise PkiError(f"cannot read {what} {path}: permission denied (run as its owner or root)") from None
    except OSError as exc:
        raise PkiError(f"cannot read {what} {path}: {exc.strerror}") from None


def _loose_mode(path: Path) -> int | None:
    """The file's mode when group or others may access it, else None."""
    mode = stat.S_IMODE(path.stat().st_mode)
    return mode if mode & (stat.S_IRWXG | stat.S_IRWXO) else None


def _write_atomic(path: Path, data: bytes, mode: int, uid: int = -1, gid: int = -1) -> None:
    """Write via a temporary file created with ``mode`` from the start (a key is never briefly 0644)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, mode)
        if uid != -1 or gid != -1:
            try:
                os.fchown(fd, uid, gid)
            except PermissionError:
                raise PkiError(
                    f"cannot give {path} to the requested owner/group: run as root or drop --owner/--group"
                ) from None
        with os.fdopen(fd, "wb") as out:
            fd = -1
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        if fd != -1:
            os.close(fd)
        Path(tmp).unlink(missing_ok=True)
        raise


def _ids(owner: str | None, group: str | None) -> tuple[int, int]:
    uid = _account_id("user", owner, "--owner", lambda name: pwd.getpwnam(name).pw_uid)
    gid = _account_id("group", group, "--group", lambda name: grp.getgrnam(name).gr_gid)
    return uid, gid


def _account_id(kind: str, name: str | None, flag: str, lookup: Callable[[str], int]) -> int:
    """The numeric id of a user or group given by name or number; -1 (chown's "unchanged") for none.

    Users and groups are looked up alike, so a missing one gets the same one-line error naming its flag.
    """
    if not name:
        return -1
    try:
        return int(name) if name.isdigit() else lookup(name)
    except KeyError:
        raise PkiError(f"there is no {kind} {name!r} on this host: create it first or drop {flag}") from None


def load_certificate(path: str | os.PathLike[str], what: str = "certificate") -> x509.Certificate:
    path = Path(path)
    data = _read(path, what)
    try:
        return x509.load_pem_x509_certificate(data)
    except ValueError:
        raise PkiError(
            f"{what} {path} is not a PEM certificate (expected a '-----BEGIN CERTIFICATE-----' block)"
        ) from None


def load_certificates(path: str | os.PathLike[str], what: str = "CA bundle") -> list[x509.Certificate]:
    """Every certificate of a PEM file, in order: a CA bundle (a rotation's window: the CA that issues
    now first, the other trusted beside it), or a file of one."""
    path = Path(path)
    data = _read(path, what)
    try:
        certs = x509.load_pem_x509_certificates(data)
    except ValueError:
        certs = []
    if not certs:
        raise PkiError(
            f"{what} {path} holds no PEM certificate (expected '-----BEGIN CERTIFICATE-----' blocks)"
        )
    return certs


def load_csr(path: str | os.PathLike[str]) -> x509.CertificateSigningRequest:
    path = Path(path)
    data = _read(path, "certificate request")
    try:
        csr = x509.load_pem_x509_csr(data)
    except ValueError:
        raise PkiError(
            f"{path} is not a PEM certificate request (expected '-----BEGIN CERTIFICATE REQUEST-----'); "
            "make one with: npudure pki csr"
        ) from None
    if not csr.is_signature_valid:
        raise PkiError(f"certificate request {path} has a bad signature: it was altered or truncated")
    return csr


def load_private_key(path: str | os.PathLike[str], what: str = "private key") -> SigningKey:
    path = Path(path)
    data = _read(path, what)
    try:
        # A DSA key warns as it loads (cryptography deprecates DSA); it is refused below in one line.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CryptographyDeprecationWarning)
            key = serialization.load_pem_private_key(data, password=None)
    except TypeError:
        raise PkiError(
            f"{what} {path} is encrypted with a passphrase; npudure keys are unencrypted"
        ) from None
    except (ValueError, UnsupportedAlgorithm):
        raise PkiError(
            f"{what} {path} is not a PEM private key (expected '-----BEGIN ... PRIVATE KEY-----')"
        ) from None
    # Key-agreement keys (DH, X25519, X448, ML-KEM) load but cannot sign, and DSA is deprecated: refuse
    # them here, not in sign().
    if not isinstance(key, _SIGNING_KEYS):
        raise PkiError(
            f"{what} {path} is a {type(key).__name__}, which npudure does not sign with; "
            "use an EC (P-256) key"
        )
    return key


def _key_pem(key: EcKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _spki(public_key: PublicKeyTypes) -> bytes:
    return public_key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


# ---------------------------------------------------------------------- names
def parse_san(value: str) -> x509.GeneralName:
    """An IP address becomes an IPAddress SAN (what gRPC matches for ``host:port`` by IP), else a DNS name."""
    value = value.strip()
    try:
        return x509.IPAddress(ipaddress.ip_address(value))
    except ValueError:
        pass
    if not value or any(c.isspace() for c in value) or "/" in value or ":" in value:
        raise PkiError(f"SAN {value!r} is neither an IP address nor a DNS name")
    return x509.DNSName(value.lower())


def _san_text(name: x509.GeneralName) -> str:
    return str(name.value)


def _cn(name: x509.Name) -> str | None:
    attrs = name.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(attrs[0].value) if attrs else None


def _sans(obj: x509.Certificate | x509.CertificateSigningRequest) -> list[x509.GeneralName]:
    try:
        ext = obj.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return []
    return [n for n in ext.value if isinstance(n, (x509.IPAddress, x509.DNSName))]


def _is_ca(cert: x509.Certificate) -> bool:
    try:
        return bool(cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca)
    except x509.ExtensionNotFound:
        return False


# ---------------------------------------------------------------------- the CA
@dataclass(frozen=True)
class CaFiles:
    key: Path
    cert: Path
    changed: bool
    note: str = ""


def _ca_problem(key_path: Path, cert_path: Path) -> str | None:
    """Why an existing CA cannot be used, or None when it can (raises on loose key permissions)."""
    check_ca_key_mode(key_path)
    cert = load_certificate(cert_path, "CA certificate")
    key = load_private_key(key_path, "CA key")
    if not _is_ca(cert):
        return f"{cert_path} is not a CA certificate (no CA:TRUE)"
    if _spki(key.public_key()) != _spki(cert.public_key()):
        return f"{key_path} does not belong to {cert_path}"
    if cert.not_valid_after_utc <= _now():
        return f"the CA expired on {cert.not_valid_after_utc:%Y-%m-%d}"
    return None


def check_ca_key_mode(key_path: Path) -> None:
    mode = _loose_mode(key_path)
    if mode is not None:
        raise PkiError(
            f"CA key {key_path} is accessible to group or other users (mode {mode:04o}); it can sign "
            f"certificates for the whole fleet: chmod 600 {key_path}"
        )


def make_ca(
    directory: str | os.PathLike[str],
    cn: str = DEFAULT_CA_CN,
    days: int = DEFAULT_CA_DAYS,
    force: bool = False,
) -> CaFiles:
    """Create ``ca.key`` (0600) and a self-signed ``ca.crt``; keep a valid existing CA unless ``force``."""
    if days < 1:
        raise PkiError(f"--days must be at least 1 (got {days})")
    directory = Path(directory)
    key_path, cert_path = directory / CA_KEY, directory / CA_CERT
    if not force and (key_path.exists() or cert_path.exists()):
        if not key_path.exists() or not cert_path.exists():
            present, missing = (key_path, cert_path) if key_path.exists() else (cert_path, key_path)
            raise PkiError(
                f"{present} exists but {missing} does not: restore it, or pass --force to start a new CA "
                "(every certificate it issued must then be re-issued)"
            )
        problem = _ca_problem(key_path, cert_path)
        if problem:
            raise PkiError(f"{problem}: pass --force to replace the CA (then re-issue every certificate)")
        existing = _cn(load_certificate(cert_path).subject)
        note = (
            "" if existing == cn else f"the existing CA's CN is {existing!r}; --cn is ignored without --force"
        )
        return CaFiles(key_path, cert_path, changed=False, note=note)

    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    now = _now()
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        _certificate(name, name, key.public_key(), now - CLOCK_SKEW, now + dt.timedelta(days=days), ca=True)
        .add_extension(ski, critical=False)
        .sign(key, hashes.SHA256())
    )
    # Key first: a crash in between leaves "key without cert", which is reported, never a cert without key.
    _write_atomic(key_path, _key_pem(key), 0o600)
    _write_atomic(cert_path, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    return CaFiles(key_path, cert_path, changed=True)


# ---------------------------------------------------------------------- host side: key + CSR
@dataclass(frozen=True)
class CsrResult:
    key: Path
    csr: Path
    key_created: bool


def ensure_key(
    path: str | os.PathLike[str], owner: str | None = None, group: str | None = None, new: bool = False
) -> tuple[SigningKey, bool]:
    """The host's key: reused when present (rotation keeps it), created 0600 when missing or ``new``."""
    path = Path(path)
    uid, gid = _ids(owner, group)
    if path.exists() and not new:
        mode = _loose_mode(path)
        if mode is not None:
            raise PkiError(
                f"private key {path} is accessible to group or other users (mode {mode:04o}): "
                f"chmod 600 {path}"
            )
        key = load_private_key(path)
        if uid != -1 or gid != -1:
            try:
                os.chown(path, uid, gid)
            except PermissionError:
                raise PkiError(f"cannot give {path} to the requested owner/group: run as root") from None
        return key, False
    key = ec.generate_private_key(ec.SECP256R1())
    _write_atomic(path, _key_pem(key), 0o600, uid, gid)
    return key, True


def make_csr(
    key_path: str | os.PathLike[str],
    csr_path: str | os.PathLike[str],
    cn: str,
    sans: Sequence[str] = (),
    owner: str | None = None,
    group: str | None = None,
    new_key: bool = False,
) -> CsrResult:
    if not cn.strip():
        raise PkiError("--cn must not be empty")
    names = _unique(parse_san(s) for s in sans)
    key, created = ensure_key(key_path, owner, group, new=new_key)
    builder = x509.CertificateSigningRequestBuilder().subject_name(
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    )
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    csr = builder.sign(key, hashes.SHA256())
    _write_atomic(Path(csr_path), csr.public_bytes(serialization.Encoding.PEM), 0o644)
    return CsrResult(Path(key_path), Path(csr_path), created)


def _unique(names: Iterable[x509.GeneralName]) -> list[x509.GeneralName]:
    out: list[x509.GeneralName] = []
    for n in names:
        if n not in out:
            out.append(n)
    return out


# ---------------------------------------------------------------------- controller side: sign
@dataclass(frozen=True)
class Signed:
    cert: Path
    cn: str
    sans: list[str]
    not_after: dt.datetime
    capped: bool  # shortened to end with the CA


def sign(
    ca_dir: str | os.PathLike[str],
    csr_path: str | os.PathLike[str],
    out: str | os.PathLike[str],
    days: int = DEFAULT_LEAF_DAYS,
    usage: Usage = "server-and-client",
    not_before: dt.datetime | None = None,
) -> Signed:
    """Issue a leaf certificate for the CSR. Only its CN, SANs and public key are used: a CSR cannot ask
    for CA:TRUE or other extensions. ``not_before`` (tests) backdates the certificate."""
    if days < 1:
        raise PkiError(f"--days must be at least 1 (got {days})")
    ca_dir = Path(ca_dir)
    key_path, cert_path = ca_dir / CA_KEY, ca_dir / CA_CERT
    for p in (key_path, cert_path):
        if not p.exists():
            raise PkiError(f"{p} does not exist: create the CA with: npudure pki init-ca --dir {ca_dir}")
    problem = _ca_problem(key_path, cert_path)
    if problem:
        raise PkiError(f"cannot sign with the CA in {ca_dir}: {problem}")
    ca_key = load_private_key(key_path, "CA key")
    ca_cert = load_certificate(cert_path, "CA certificate")
    csr = load_csr(csr_path)
    cn = _cn(csr.subject)
    if not cn:
        raise PkiError(f"certificate request {csr_path} has no CN: make it with npudure pki csr --cn NAME")
    sans = _sans(csr)

    start = (not_before or _now()) - CLOCK_SKEW
    end = start + CLOCK_SKEW + dt.timedelta(days=days)
    capped = end > ca_cert.not_valid_after_utc
    end = min(end, ca_cert.not_valid_after_utc)
    purposes = [ExtendedKeyUsageOID.CLIENT_AUTH]
    if usage == "server-and-client":
        purposes.insert(0, ExtendedKeyUsageOID.SERVER_AUTH)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    builder = (
        _certificate(subject, ca_cert.subject, csr.public_key(), start, end, ca=False)
        .add_extension(x509.ExtendedKeyUsage(purposes), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(csr.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    _write_atomic(Path(out), cert.public_bytes(serialization.Encoding.PEM), 0o644)
    return Signed(Path(out), cn, [_san_text(n) for n in sans], end, capped)


def _certificate(
    subject: x509.Name,
    issuer: x509.Name,
    public_key: CertificatePublicKeyTypes,
    start: dt.datetime,
    end: dt.datetime,
    *,
    ca: bool,
) -> x509.CertificateBuilder:
    """What the CA and every leaf start from: names, key, a random serial, the validity, and the critical
    constraints and key usage of a CA (signs certificates) or of a leaf (TLS: signs, takes keys).

    One builder, so the CA and the certificates it signs cannot drift apart in what they assert.
    """
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=0 if ca else None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=not ca,
                content_commitment=False,
                key_encipherment=not ca,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=ca,
                crl_sign=ca,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    )


# ---------------------------------------------------------------------- one call for tests and labs
@dataclass(frozen=True)
class Issued:
    key: Path
    cert: Path
    csr: Path
    ca: Path


def issue(
    ca_dir: str | os.PathLike[str],
    cn: str,
    sans: Sequence[str] = (),
    out_dir: str | os.PathLike[str] | None = None,
    days: int = DEFAULT_LEAF_DAYS,
    key_name: str | None = None,
    usage: Usage = "server-and-client",
    not_before: dt.datetime | None = None,
) -> Issued:
    """Key, CSR and signed certificate in one call: ``<key_name>.key/.csr/.crt`` in ``out_dir``
    (default: the CA directory; ``key_name`` defaults to the CN)."""
    out = Path(out_dir) if out_dir is not None else Path(ca_dir)
    stem = key_name or cn.replace("/", "_").replace(" ", "_")
    made = make_csr(out / f"{stem}.key", out / f"{stem}.csr", cn, sans)
    signed = sign(ca_dir, made.csr, out / f"{stem}.crt", days=days, usage=usage, not_before=not_before)
    return Issued(made.key, signed.cert, made.csr, Path(ca_dir) / CA_CERT)


# ---------------------------------------------------------------------- check
@dataclass
class CheckResult:
    ok: bool
    reasons: list[str] = field(default_factory=list)
    days_left: int | None = None
    cn: str | None = None
    sans: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        # `npudure pki check --json` prints exactly the fields, in their order.
        return asdict(self)


def check_certificate(
    cert: str | os.PathLike[str],
    ca: str | os.PathLike[str] | None = None,
    key: str | os.PathLike[str] | None = None,
    min_days: int = DEFAULT_MIN_DAYS,
    cn: str | None = None,
    sans: Sequence[str] = (),
    now: dt.datetime | None = None,
    issuer: Issuer = "any",
) -> CheckResult:
    """Every reason the certificate should be (re-)issued; ``ok`` when there is none.

    ``days_left`` counts whole days; the certificate passes with at least ``min_days`` of them.
    ``ca`` may be a bundle: ``issuer="any"`` accepts a certificate signed by any CA in it (what the
    services trust during a CA rotation), ``"first"`` only one signed by its first CA (the one that
    issues now: a rotation's switch re-issues every other certificate).
    """
    now = now or _now()
    result = CheckResult(ok=False)
    try:
        certificate = load_certificate(cert)
    except PkiError as exc:
        missing = not Path(cert).exists()
        result.reasons.append(f"{exc}: issue one" if missing else str(exc))
        return result
    result.cn = _cn(certificate.subject)
    result.sans = [_san_text(n) for n in _sans(certificate)]
    reasons = result.reasons

    left = certificate.not_valid_after_utc - now
    result.days_left = left.days  # floor: 12.9 days left counts as 12
    if certificate.not_valid_before_utc > now:
        reasons.append(
            f"not valid before {certificate.not_valid_before_utc:%Y-%m-%d %H:%M} UTC: check this host's clock"
        )
    if left <= dt.timedelta(0):
        reasons.append(f"expired on {certificate.not_valid_after_utc:%Y-%m-%d %H:%M} UTC: rotate")
    elif left.days < min_days:
        reasons.append(f"expires in {left.days} days (< {min_days}): rotate")

    if ca is not None:
        _check_issuer(certificate, Path(ca), now, reasons, issuer)
    if key is not None:
        try:
            private = load_private_key(key)
        except PkiError as exc:
            reasons.append(str(exc))
        else:
            if _spki(private.public_key()) != _spki(certificate.public_key()):
                reasons.append(f"key does not match certificate ({key})")

    if cn is not None and result.cn != cn:
        reasons.append(f"CN is {result.cn!r}, expected {cn!r}")
    have = set(_sans(certificate))
    for wanted in sans:
        try:
            name = parse_san(wanted)
        except PkiError as exc:
            reasons.append(str(exc))
            continue
        if name not in have:
            reasons.append(f"SAN {wanted} missing")
    result.ok = not reasons
    return result


def _check_issuer(
    certificate: x509.Certificate, ca_path: Path, now: dt.datetime, reasons: list[str], issuer: Issuer = "any"
) -> None:
    try:
        bundle = load_certificates(ca_path, "CA certificate")
    except PkiError as exc:
        reasons.append(str(exc))
        return
    not_ca = [i for i, c in enumerate(bundle, 1) if not _is_ca(c)]
    if not_ca:
        which = "" if len(bundle) == 1 else f" (certificate {', '.join(map(str, not_ca))} of the bundle)"
        reasons.append(f"{ca_path.name} is not a CA certificate{which} (no CA:TRUE)")
        return
    candidates = bundle[:1] if issuer == "first" else bundle
    ca_cert = next((c for c in candidates if _signed_by(certificate, c)), None)
    if ca_cert is None:
        if issuer == "first" and any(_signed_by(certificate, c) for c in bundle[1:]):
            reasons.append(
                f"signed by a CA of {ca_path.name} that no longer issues (a CA rotation): re-issue"
            )
        else:
            reasons.append(f"not signed by {ca_path.name}")
        return
    if ca_cert.not_valid_after_utc <= now:
        reasons.append(
            f"the CA {ca_path.name} expired on {ca_cert.not_valid_after_utc:%Y-%m-%d}: "
            "create a new CA (init-ca --force) and re-issue"
        )


def _signed_by(certificate: x509.Certificate, ca_cert: x509.Certificate) -> bool:
    try:
        certificate.verify_directly_issued_by(ca_cert)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True
