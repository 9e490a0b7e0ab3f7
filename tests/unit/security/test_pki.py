"""The small CA (npudure pki): files and permissions, the csr -> sign -> check flow, every check failure,
the CLI's exit codes, and a real mutual-TLS handshake through gRPC."""

from __future__ import annotations

import datetime as dt
import json
import os
import pwd
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from helpers.pki_fleet import make_fleet

from npudure.cli import main
from npudure.security import pki


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def cert_of(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def ext(cert: x509.Certificate, cls):
    return cert.extensions.get_extension_for_class(cls).value


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> dict[str, Path | pki.Issued]:
    """helpers/pki_fleet.py's CAs and certificates, made once per module."""
    return make_fleet(tmp_path_factory.mktemp("pki"))


# ---------------------------------------------------------------------- init-ca
def test_init_ca_writes_a_private_key_and_a_ca_certificate(tmp_path):
    ca = pki.make_ca(tmp_path / "ca", cn="Test CA", days=100)
    assert ca.changed
    assert mode(ca.key) == 0o600
    cert = cert_of(ca.cert)
    assert ext(cert, x509.BasicConstraints).ca is True
    usage = ext(cert, x509.KeyUsage)
    assert usage.key_cert_sign and usage.crl_sign and not usage.digital_signature
    assert cert.subject == cert.issuer
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "Test CA"
    assert isinstance(cert.public_key(), ec.EllipticCurvePublicKey)
    assert cert.public_key().curve.name == "secp256r1"
    cert.verify_directly_issued_by(cert)  # self-signed
    assert 99 <= (cert.not_valid_after_utc - dt.datetime.now(dt.UTC)).days <= 100


def test_init_ca_keeps_a_valid_ca_and_force_replaces_it(tmp_path, capsys):
    ca_dir = tmp_path / "ca"
    assert main(["pki", "init-ca", "--dir", str(ca_dir)]) == 0
    key, cert = (ca_dir / "ca.key").read_bytes(), (ca_dir / "ca.crt").read_bytes()
    capsys.readouterr()

    assert main(["pki", "init-ca", "--dir", str(ca_dir)]) == 0
    assert "unchanged" in capsys.readouterr().out
    assert (ca_dir / "ca.key").read_bytes() == key
    assert (ca_dir / "ca.crt").read_bytes() == cert

    assert main(["pki", "init-ca", "--dir", str(ca_dir), "--force"]) == 0
    assert "unchanged" not in capsys.readouterr().out
    assert (ca_dir / "ca.key").read_bytes() != key
    assert (ca_dir / "ca.crt").read_bytes() != cert
    assert mode(ca_dir / "ca.key") == 0o600


def test_a_ca_key_readable_by_others_is_refused(tmp_path, capsys):
    ca_dir = tmp_path / "ca"
    pki.make_ca(ca_dir)
    (ca_dir / "ca.key").chmod(0o640)
    assert main(["pki", "init-ca", "--dir", str(ca_dir)]) == 1
    err = capsys.readouterr().err
    assert "0640" in err and f"chmod 600 {ca_dir / 'ca.key'}" in err

    made = pki.make_csr(tmp_path / "h.key", tmp_path / "h.csr", "h")
    with pytest.raises(pki.PkiError, match="chmod 600"):
        pki.sign(ca_dir, made.csr, tmp_path / "h.crt")
    assert not (tmp_path / "h.crt").exists()


def test_half_a_ca_is_reported_not_silently_replaced(tmp_path):
    ca_dir = tmp_path / "ca"
    pki.make_ca(ca_dir)
    (ca_dir / "ca.key").unlink()
    before = (ca_dir / "ca.crt").read_bytes()
    with pytest.raises(pki.PkiError, match=r"ca\.key does not.*--force"):
        pki.make_ca(ca_dir)
    assert (ca_dir / "ca.crt").read_bytes() == before


def test_an_expired_ca_is_not_kept(tmp_path):
    ca_dir = tmp_path / "ca"
    pki.make_ca(ca_dir, days=1)
    key = serialization.load_pem_private_key((ca_dir / "ca.key").read_bytes(), None)
    old = cert_of(ca_dir / "ca.crt")
    past = dt.datetime.now(dt.UTC) - dt.timedelta(days=10)
    expired = (
        x509.CertificateBuilder()
        .subject_name(old.subject)
        .issuer_name(old.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(past)
        .not_valid_after(past + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(key, hashes.SHA256())
    )
    (ca_dir / "ca.crt").write_bytes(expired.public_bytes(serialization.Encoding.PEM))
    with pytest.raises(pki.PkiError, match=r"expired.*--force"):
        pki.make_ca(ca_dir)
    assert pki.make_ca(ca_dir, force=True).changed


# ---------------------------------------------------------------------- csr -> sign -> check
def test_csr_sign_check_roundtrip_through_the_cli(tmp_path, fleet, capsys):
    key, csr, crt = tmp_path / "host" / "agent.key", tmp_path / "host" / "agent.csr", tmp_path / "agent.crt"
    me = pwd.getpwuid(os.getuid()).pw_name
    argv = ["pki", "csr", "--key", str(key), "--csr", str(csr), "--cn", "board2", "--owner", me]
    assert main([*argv, "--san", "10.0.0.5", "board2.lan", "--san", "fd00::5"]) == 0
    assert mode(key) == 0o600
    assert key.stat().st_uid == os.getuid()
    assert "created" in capsys.readouterr().out

    assert main(["pki", "sign", "--ca-dir", str(fleet["ca_dir"]), "--csr", str(csr), "--out", str(crt)]) == 0
    cert = cert_of(crt)
    cert.verify_directly_issued_by(cert_of(fleet["ca"]))
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "board2"
    sans = ext(cert, x509.SubjectAlternativeName)
    assert {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)} == {"10.0.0.5", "fd00::5"}
    assert sans.get_values_for_type(x509.DNSName) == ["board2.lan"]
    assert ext(cert, x509.BasicConstraints).ca is False
    usage = ext(cert, x509.KeyUsage)
    assert usage.digital_signature and usage.key_encipherment and not usage.key_cert_sign
    assert set(ext(cert, x509.ExtendedKeyUsage)) == {
        ExtendedKeyUsageOID.SERVER_AUTH,
        ExtendedKeyUsageOID.CLIENT_AUTH,
    }
    capsys.readouterr()

    check = ["pki", "check", "--cert", str(crt), "--ca", str(fleet["ca"]), "--key", str(key)]
    assert main([*check, "--cn", "board2", "--san", "10.0.0.5", "--san", "board2.lan", "--json"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["ok"] is True and body["reasons"] == []
    assert body["cn"] == "board2"
    assert set(body["sans"]) == {"10.0.0.5", "fd00::5", "board2.lan"}
    assert 364 <= body["days_left"] <= 365


def test_re_csr_reuses_the_key_unless_new_key(tmp_path, capsys):
    key, csr = tmp_path / "a.key", tmp_path / "a.csr"
    first = pki.make_csr(key, csr, "a", ["127.0.0.1"])
    original = key.read_bytes()
    again = pki.make_csr(key, csr, "a", ["127.0.0.1", "10.0.0.9"])
    assert first.key_created and not again.key_created
    assert key.read_bytes() == original
    public = serialization.load_pem_private_key(original, None).public_key()
    assert x509.load_pem_x509_csr(csr.read_bytes()).public_key() == public

    assert main(["pki", "csr", "--key", str(key), "--csr", str(csr), "--cn", "a", "--new-key"]) == 0
    assert "created" in capsys.readouterr().out
    assert key.read_bytes() != original
    assert mode(key) == 0o600


def test_csr_refuses_an_exposed_key_and_unknown_users(tmp_path):
    key = tmp_path / "a.key"
    pki.make_csr(key, tmp_path / "a.csr", "a")
    key.chmod(0o644)
    with pytest.raises(pki.PkiError, match="chmod 600"):
        pki.make_csr(key, tmp_path / "a.csr", "a")
    with pytest.raises(pki.PkiError, match="no user 'no-such-user-npudure'"):
        pki.make_csr(tmp_path / "b.key", tmp_path / "b.csr", "b", owner="no-such-user-npudure")
    assert not (tmp_path / "b.key").exists()
    with pytest.raises(pki.PkiError, match="neither an IP address nor a DNS name"):
        pki.make_csr(tmp_path / "c.key", tmp_path / "c.csr", "c", sans=["10.0.0.1/24"])


def test_client_only_certificates_cannot_serve(fleet):
    cert = cert_of(fleet["admin"].cert)
    assert list(ext(cert, x509.ExtendedKeyUsage)) == [ExtendedKeyUsageOID.CLIENT_AUTH]


def test_a_csr_cannot_ask_to_become_a_ca(tmp_path, fleet):
    key = ec.generate_private_key(ec.SECP256R1())
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sneaky")]))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    (tmp_path / "s.csr").write_bytes(csr.public_bytes(serialization.Encoding.PEM))
    signed = pki.sign(fleet["ca_dir"], tmp_path / "s.csr", tmp_path / "s.crt")
    assert ext(cert_of(signed.cert), x509.BasicConstraints).ca is False


def test_a_leaf_never_outlives_its_ca(tmp_path):
    pki.make_ca(tmp_path / "ca", days=10)
    issued = pki.issue(tmp_path / "ca", "short", ["127.0.0.1"], tmp_path, days=365)
    assert cert_of(issued.cert).not_valid_after_utc == cert_of(issued.ca).not_valid_after_utc


def test_sign_explains_missing_and_non_pem_inputs(tmp_path, fleet):
    with pytest.raises(pki.PkiError, match=r"does not exist: create the CA with: npudure pki init-ca"):
        pki.sign(tmp_path / "nope", tmp_path / "x.csr", tmp_path / "x.crt")
    (tmp_path / "x.csr").write_text("hello\n")
    with pytest.raises(pki.PkiError, match="not a PEM certificate request"):
        pki.sign(fleet["ca_dir"], tmp_path / "x.csr", tmp_path / "x.crt")


# ---------------------------------------------------------------------- check failures
def test_check_reports_an_expired_certificate(tmp_path, fleet):
    ten_days_ago = dt.datetime.now(dt.UTC) - dt.timedelta(days=10)
    old = pki.issue(fleet["ca_dir"], "old", ["127.0.0.1"], tmp_path, days=5, not_before=ten_days_ago)
    result = pki.check_certificate(old.cert, ca=fleet["ca"], key=old.key, min_days=0)
    assert not result.ok
    assert result.days_left is not None and result.days_left < 0
    assert len(result.reasons) == 1 and result.reasons[0].startswith("expired on ")


def test_check_asks_for_rotation_before_min_days(tmp_path, fleet, capsys):
    issued = pki.issue(fleet["ca_dir"], "soon", ["127.0.0.1"], tmp_path, days=10)
    assert main(["pki", "check", "--cert", str(issued.cert), "--min-days", "5"]) == 0
    capsys.readouterr()
    assert main(["pki", "check", "--cert", str(issued.cert), "--min-days", "30"]) == 1
    assert "expires in 9 days (< 30): rotate" in capsys.readouterr().out


def test_check_reports_every_reason_at_once(fleet, capsys):
    server = fleet["server"]
    argv = ["pki", "check", "--cert", str(server.cert), "--ca", str(fleet["other_ca"])]
    argv += ["--key", str(fleet["viewer"].key), "--cn", "board9", "--san", "127.0.0.1", "10.0.0.5", "--json"]
    assert main(argv) == 1
    body = json.loads(capsys.readouterr().out)
    assert body["ok"] is False
    assert body["cn"] == "board1"
    assert body["sans"] == ["127.0.0.1", "board1.lan"]
    reasons = body["reasons"]
    assert "not signed by ca.crt" in reasons
    assert any(r.startswith("key does not match certificate") for r in reasons)
    assert "CN is 'board1', expected 'board9'" in reasons
    assert "SAN 10.0.0.5 missing" in reasons
    assert not any("127.0.0.1" in r for r in reasons)
    assert len(reasons) == 4


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("wrong_ca", "not signed by ca.crt"),
        ("wrong_key", "key does not match certificate"),
        ("missing_san", "SAN board2.lan missing"),
    ],
)
def test_check_each_failure_alone(fleet, case, expected):
    server = fleet["server"]
    kwargs: dict[str, object] = {"ca": fleet["ca"], "key": server.key, "sans": ["127.0.0.1"]}
    if case == "wrong_ca":
        kwargs["ca"] = fleet["other_ca"]
    elif case == "wrong_key":
        kwargs["key"] = fleet["admin"].key
    else:
        kwargs["sans"] = ["127.0.0.1", "board2.lan"]
    result = pki.check_certificate(server.cert, **kwargs)
    assert result.ok is False
    assert len(result.reasons) == 1 and result.reasons[0].startswith(expected)


def test_check_a_missing_or_non_pem_certificate(tmp_path, fleet, capsys):
    assert main(["pki", "check", "--cert", str(tmp_path / "none.crt")]) == 1
    assert "does not exist: issue one" in capsys.readouterr().out
    assert main(["pki", "check", "--cert", str(fleet["server"].key), "--json"]) == 1
    body = json.loads(capsys.readouterr().out)
    assert body["ok"] is False and body["days_left"] is None
    assert "is not a PEM certificate" in body["reasons"][0]


def test_cli_usage_errors_exit_2(tmp_path):
    with pytest.raises(SystemExit) as exc:
        main(
            [
                "pki",
                "sign",
                "--ca-dir",
                str(tmp_path),
                "--csr",
                "x",
                "--out",
                "y",
                "--client-only",
                "--server-and-client",
            ]
        )
    assert exc.value.code == 2


def test_a_key_file_that_is_not_pem_is_a_pki_error(tmp_path):
    # The except clause named an attribute serialization does not have: a bad key was a traceback.
    bad = tmp_path / "host.key"
    bad.write_text("not a key\n")
    with pytest.raises(pki.PkiError, match="is not a PEM private key"):
        pki.load_private_key(bad)


def test_a_key_that_cannot_sign_is_a_pki_error(tmp_path):
    from cryptography.hazmat.primitives.asymmetric import x25519

    pem = x25519.X25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    path = tmp_path / "host.key"
    path.write_bytes(pem)
    with pytest.raises(pki.PkiError, match="does not sign with"):
        pki.load_private_key(path)
