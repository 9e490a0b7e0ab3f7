"""A CA rotation on the controller's CA folder (npudure pki rotate-ca): the three phases, their order,
re-runs that change nothing, and the bundle-aware issuer check the role uses to decide re-issue."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography import x509

from npudure.cli import main
from npudure.security import ca_rotation, crl, pki


def certs_of(path: Path) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(path.read_bytes())


def cert_of(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


@pytest.fixture
def ca_dir(tmp_path: Path) -> Path:
    pki.make_ca(tmp_path / "pki")
    return tmp_path / "pki"


def check(cert: Path, ca: Path, issuer: pki.Issuer = "any") -> pki.CheckResult:
    return pki.check_certificate(cert, ca=ca, issuer=issuer)


# ---------------------------------------------------------------------- the issuer check
def test_a_bundle_accepts_a_certificate_of_either_ca_and_first_only_the_issuing_one(tmp_path, ca_dir):
    other = pki.make_ca(tmp_path / "new").cert
    old_leaf = pki.issue(ca_dir, "board1", ["127.0.0.1"], tmp_path / "o").cert
    new_leaf = pki.issue(tmp_path / "new", "board1", ["127.0.0.1"], tmp_path / "n").cert
    bundle = tmp_path / "bundle.crt"
    bundle.write_bytes(other.read_bytes() + (ca_dir / "ca.crt").read_bytes())  # new first: switched

    assert check(old_leaf, bundle).ok and check(new_leaf, bundle).ok
    assert check(new_leaf, bundle, "first").ok
    result = check(old_leaf, bundle, "first")
    assert not result.ok
    assert result.reasons == ["signed by a CA of bundle.crt that no longer issues (a CA rotation): re-issue"]
    # A CA of neither: refused either way, with the plain reason.
    stranger = pki.make_ca(tmp_path / "stranger")
    foreign = pki.issue(tmp_path / "stranger", "board1", [], tmp_path / "f").cert
    assert check(foreign, bundle).reasons == ["not signed by bundle.crt"]
    assert check(foreign, bundle, "first").reasons == ["not signed by bundle.crt"]
    assert check(foreign, stranger.cert).ok


def test_a_bundle_with_a_leaf_in_it_or_no_certificate_is_reported(tmp_path, ca_dir):
    leaf = pki.issue(ca_dir, "board1", [], tmp_path / "o").cert
    bundle = tmp_path / "bundle.crt"
    bundle.write_bytes((ca_dir / "ca.crt").read_bytes() + leaf.read_bytes())
    assert check(leaf, bundle).reasons == [
        "bundle.crt is not a CA certificate (certificate 2 of the bundle) (no CA:TRUE)"
    ]
    bundle.write_text("not pem\n")
    assert "holds no PEM certificate" in check(leaf, bundle).reasons[0]


def test_the_cli_check_takes_the_issuer_choice(tmp_path, ca_dir, capsys):
    pki.make_ca(tmp_path / "new")
    leaf = pki.issue(ca_dir, "board1", [], tmp_path / "o").cert
    bundle = tmp_path / "bundle.crt"
    bundle.write_bytes((tmp_path / "new" / "ca.crt").read_bytes() + (ca_dir / "ca.crt").read_bytes())
    argv = ["pki", "check", "--cert", str(leaf), "--ca", str(bundle)]
    assert main(argv) == 0
    assert main([*argv, "--issuer", "first"]) == 1
    assert "no longer issues" in capsys.readouterr().out


# ---------------------------------------------------------------------- the phases
def test_three_phases_move_the_bundle_and_the_issuing_ca(ca_dir):
    old = (ca_dir / "ca.crt").read_bytes()
    old_key = (ca_dir / "ca.key").read_bytes()

    step = ca_rotation.advance(ca_dir, "start")
    assert step.changed
    new = (ca_dir / "next" / "ca.crt").read_bytes()
    assert (ca_dir / "next" / "ca.key").stat().st_mode & 0o077 == 0
    assert (ca_dir / "trust.crt").read_bytes() == old + new  # the old one still issues
    assert (ca_dir / "ca.crt").read_bytes() == old
    assert ca_rotation.current_phase(ca_dir) == "start"

    assert ca_rotation.advance(ca_dir, "switch").changed
    assert (ca_dir / "trust.crt").read_bytes() == new + old  # the new one issues
    assert ca_rotation.current_phase(ca_dir) == "switch"

    step = ca_rotation.advance(ca_dir, "finish")
    assert step.changed
    assert (ca_dir / "ca.crt").read_bytes() == new
    assert (ca_dir / "trust.crt").read_bytes() == new
    assert not (ca_dir / "next").exists()
    assert ca_rotation.current_phase(ca_dir) is None
    [kept] = (ca_dir / "retired").iterdir()
    assert (kept / "ca.crt").read_bytes() == old and (kept / "ca.key").read_bytes() == old_key
    # The new CA signs as the fleet's now.
    made = pki.make_csr(ca_dir / "h.key", ca_dir / "h.csr", "h")
    pki.sign(ca_dir, made.csr, ca_dir / "h.crt")
    cert_of(ca_dir / "h.crt").verify_directly_issued_by(cert_of(ca_dir / "ca.crt"))


def test_finish_retires_the_old_cas_crl_with_it_and_revoke_starts_a_new_one(ca_dir, tmp_path):
    """A CRL the new CA did not sign would stop the services at start (crl.read_revoked refuses it):
    finish moves it into retired/ beside the old CA, and the next revoke is signed by the new CA."""
    board = pki.issue(ca_dir, "board3", ["127.0.0.1"], tmp_path / "certs").cert
    crl.revoke(ca_dir, cert=board)
    for phase in ("start", "switch", "finish"):
        ca_rotation.advance(ca_dir, phase)
    assert not (ca_dir / crl.CRL_NAME).exists()
    [kept] = (ca_dir / "retired").iterdir()
    assert (kept / crl.CRL_NAME).is_file()
    fresh = pki.issue(ca_dir, "board4", ["127.0.0.1"], tmp_path / "certs").cert
    done = crl.revoke(ca_dir, cert=fresh)
    assert done.count == 1
    assert crl.read_revoked(ca_dir / crl.CRL_NAME, ca_dir / "ca.crt") == {cert_of(fresh).serial_number}


@pytest.mark.parametrize("phase", ["start", "switch", "finish"])
def test_a_phase_run_again_changes_nothing(ca_dir, phase):
    for earlier in ca_rotation.PHASES[: ca_rotation.PHASES.index(phase) + 1]:
        ca_rotation.advance(ca_dir, earlier)
    before = {p: p.read_bytes() for p in ca_dir.rglob("*") if p.is_file()}
    step = ca_rotation.advance(ca_dir, phase)
    assert not step.changed, step.message
    assert {p: p.read_bytes() for p in ca_dir.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize(
    ("done", "phase", "says"),
    [
        (
            [],
            "switch",
            "start one first (playbooks/rotate-ca.yml -e npudure_ca_rotation=start)",
        ),
        ([], "finish", "no CA rotation is under way: start one first"),
        (
            ["start"],
            "finish",
            "switch first (playbooks/rotate-ca.yml -e npudure_ca_rotation=switch)",
        ),
        (["start", "switch"], "start", "past its start (the certificates are switched): finish it"),
    ],
)
def test_a_phase_out_of_order_is_refused_with_what_to_run(ca_dir, capsys, done, phase, says):
    for earlier in done:
        ca_rotation.advance(ca_dir, earlier)
    before = {p: p.read_bytes() for p in ca_dir.rglob("*") if p.is_file()}
    assert main(["pki", "rotate-ca", "--dir", str(ca_dir), "--phase", phase]) == 1
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1, err
    assert {p: p.read_bytes() for p in ca_dir.rglob("*") if p.is_file()} == before


def test_no_ca_to_rotate_is_one_line(tmp_path, capsys):
    assert main(["pki", "rotate-ca", "--dir", str(tmp_path / "none"), "--phase", "start"]) == 1
    assert "there is no fleet CA in" in capsys.readouterr().err


def test_the_cli_says_changed_then_unchanged(ca_dir, capsys):
    argv = ["pki", "rotate-ca", "--dir", str(ca_dir), "--phase", "start"]
    assert main(argv) == 0
    assert capsys.readouterr().out.startswith("changed: start: new CA ")
    assert main(argv) == 0
    assert capsys.readouterr().out.startswith("unchanged: start:")


def test_a_second_rotation_after_a_finished_one(ca_dir):
    for phase in ca_rotation.PHASES:
        ca_rotation.advance(ca_dir, phase)
    second = (ca_dir / "ca.crt").read_bytes()
    ca_rotation.advance(ca_dir, "start")
    assert certs_of(ca_dir / "trust.crt")[0] == cert_of(ca_dir / "ca.crt")
    assert (ca_dir / "trust.crt").read_bytes().startswith(second)
    assert len(certs_of(ca_dir / "trust.crt")) == 2
