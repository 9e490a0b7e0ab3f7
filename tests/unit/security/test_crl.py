"""The fleet's CRL: ``npudure pki revoke`` (by file or serial, idempotent, every refusal with its exit
code) and what the services make of the file (absent, foreign, garbage, cached verdicts)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from cryptography import x509

from npudure.cli import main
from npudure.config import TlsConfig
from npudure.security import crl, pki
from npudure.security.revocation import Revocations


@pytest.fixture
def fleet(tmp_path: Path) -> dict[str, Path]:
    pki.make_ca(tmp_path / "ca")
    pki.make_ca(tmp_path / "other")
    return {
        "ca": tmp_path / "ca",
        "other": tmp_path / "other",
        "board": pki.issue(tmp_path / "ca", "board3", ["127.0.0.1"], tmp_path / "certs").cert,
        "viewer": pki.issue(tmp_path / "ca", "viewer", [], tmp_path / "certs", usage="client-only").cert,
        "foreign": pki.issue(tmp_path / "other", "board3", [], tmp_path / "foreign").cert,
    }


def serial_of(path: Path) -> int:
    return x509.load_pem_x509_certificate(path.read_bytes()).serial_number


def listed(ca_dir: Path) -> list[int]:
    return [e.serial_number for e in x509.load_pem_x509_crl((ca_dir / crl.CRL_NAME).read_bytes())]


def test_revoking_a_certificate_writes_a_crl_signed_by_the_ca(fleet) -> None:
    done = crl.revoke(fleet["ca"], cert=fleet["board"], days=10)
    assert done.added and done.written and done.count == 1
    parsed = x509.load_pem_x509_crl(done.crl.read_bytes())
    ca = x509.load_pem_x509_certificate((fleet["ca"] / "ca.crt").read_bytes())
    assert parsed.issuer == ca.subject and parsed.is_signature_valid(ca.public_key())  # type: ignore[arg-type]
    assert [e.serial_number for e in parsed] == [serial_of(fleet["board"])]
    assert parsed.next_update_utc is not None
    assert dt.timedelta(days=9) < parsed.next_update_utc - dt.datetime.now(dt.UTC) <= dt.timedelta(days=10)


def test_revoking_twice_keeps_one_entry_and_leaves_the_file(fleet) -> None:
    crl.revoke(fleet["ca"], cert=fleet["board"])
    before = (fleet["ca"] / crl.CRL_NAME).read_bytes()
    again = crl.revoke(fleet["ca"], serial=crl.serial_text(serial_of(fleet["board"])))
    assert not again.added and not again.written and again.count == 1
    assert (fleet["ca"] / crl.CRL_NAME).read_bytes() == before
    crl.revoke(fleet["ca"], cert=fleet["viewer"])
    assert sorted(listed(fleet["ca"])) == sorted([serial_of(fleet["board"]), serial_of(fleet["viewer"])])


def test_a_crl_near_its_next_update_is_re_signed_by_a_repeated_revoke(fleet) -> None:
    crl.revoke(fleet["ca"], cert=fleet["board"], days=5)  # under RENEW_DAYS left
    again = crl.revoke(fleet["ca"], cert=fleet["board"])
    assert not again.added and again.written and listed(fleet["ca"]) == [serial_of(fleet["board"])]


@pytest.mark.parametrize("text", ["serial=0A1B", "0a:1b", "0x0A1B", "a1b"])
def test_serials_are_read_as_openssl_prints_them(text: str) -> None:
    assert crl.parse_serial(text) == 0xA1B


def test_cli_revoke_and_its_one_line_refusals(fleet, tmp_path, capsys) -> None:
    ca = str(fleet["ca"])
    assert main(["pki", "revoke", "--ca-dir", ca, "--cert", str(fleet["board"])]) == 0
    assert "revoked serial" in capsys.readouterr().out
    assert main(["pki", "revoke", "--ca-dir", ca, "--cert", str(fleet["board"])]) == 0
    assert capsys.readouterr().out.startswith("unchanged: serial")

    cases = {
        "not issued by": ["--ca-dir", ca, "--cert", str(fleet["foreign"])],
        "does not exist": ["--ca-dir", ca, "--cert", str(tmp_path / "missing.crt")],
        "must be the fleet's CA folder": ["--ca-dir", str(tmp_path), "--cert", str(fleet["board"])],
        "not a hexadecimal number": ["--ca-dir", ca, "--serial", "board3"],
    }
    for message, argv in cases.items():
        assert main(["pki", "revoke", *argv]) == 1, message
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1 and "Traceback" not in err
    with pytest.raises(SystemExit) as exit_:  # neither --cert nor --serial: bad arguments
        main(["pki", "revoke", "--ca-dir", ca])
    assert exit_.value.code == 2


def test_a_crl_left_from_another_ca_is_refused_by_revoke(fleet) -> None:
    crl.revoke(fleet["other"], cert=fleet["foreign"])
    (fleet["ca"] / crl.CRL_NAME).write_bytes((fleet["other"] / crl.CRL_NAME).read_bytes())
    with pytest.raises(pki.PkiError, match="is not signed by the CA"):
        crl.revoke(fleet["ca"], cert=fleet["board"])


# ---------------------------------------------------------------------- the services' side
def tls(fleet, crl_path: Path | None = None) -> TlsConfig:
    ca = fleet["ca"] / "ca.crt"
    return TlsConfig(ca=str(ca), cert="-", key="-", crl=str(crl_path) if crl_path else None)


def test_an_absent_crl_revokes_nothing_and_the_default_is_beside_the_ca(fleet) -> None:
    revocations = Revocations(tls(fleet))
    assert revocations.path == str(fleet["ca"] / crl.CRL_NAME) and revocations.serials == frozenset()


def test_the_service_refuses_listed_certificates_and_caches_by_bytes(fleet) -> None:
    crl.revoke(fleet["ca"], cert=fleet["board"])
    revocations = Revocations(tls(fleet))
    board, viewer = fleet["board"].read_bytes(), fleet["viewer"].read_bytes()
    assert revocations.revoked_serial(board) == serial_of(fleet["board"])
    assert revocations.revoked_serial(viewer) is None
    assert revocations._verdicts == {board: serial_of(fleet["board"]), viewer: None}
    crl.revoke(fleet["ca"], cert=fleet["viewer"])
    assert revocations.revoked_serial(viewer) is None  # until reloaded
    assert revocations.reload() == 2 and revocations.revoked_serial(viewer) == serial_of(fleet["viewer"])


def test_a_crl_from_another_ca_or_garbage_is_a_clear_error_and_a_reload_keeps_the_list(
    fleet, tmp_path
) -> None:
    crl.revoke(fleet["other"], cert=fleet["foreign"])
    with pytest.raises(crl.CrlError, match="is not signed by the CA"):
        Revocations(tls(fleet, fleet["other"] / crl.CRL_NAME))
    garbage = tmp_path / "crl.pem"
    garbage.write_text("not a crl\n")
    with pytest.raises(crl.CrlError, match="is not a PEM CRL"):
        Revocations(tls(fleet, garbage))
    crl.revoke(fleet["ca"], cert=fleet["board"])
    revocations = Revocations(tls(fleet))
    (fleet["ca"] / crl.CRL_NAME).write_text("truncated\n")
    with pytest.raises(crl.CrlError):
        revocations.reload()
    assert revocations.serials == {serial_of(fleet["board"])}


def test_a_trust_file_with_two_cas_accepts_a_crl_from_either(fleet, tmp_path) -> None:
    crl.revoke(fleet["other"], cert=fleet["foreign"])
    bundle = tmp_path / "bundle.crt"
    bundle.write_bytes((fleet["ca"] / "ca.crt").read_bytes() + (fleet["other"] / "ca.crt").read_bytes())
    assert crl.read_revoked(fleet["other"] / crl.CRL_NAME, bundle) == {serial_of(fleet["foreign"])}
