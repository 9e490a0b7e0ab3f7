"""``npudure pki init-ca|csr|sign|check|rotate-ca|revoke``: a small CA for the optional mutual TLS.

The CA key stays on the controller; every host makes its own key and CSR (``csr``), the controller
signs it (``sign``) and returns only the certificate. ``check`` decides whether a certificate must be
(re-)issued; ``revoke`` lists a certificate on the CA's CRL (crl.pem), which the services refuse.
Exit codes: 0 = fine (including "unchanged"), 1 = a check failed or a file is wrong,
2 = bad arguments.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from npudure.argtypes import whole
from npudure.security import ca_rotation, crl, pki


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="pki_command", metavar="ACTION", required=True)
    for name, action in _ACTIONS.items():
        action.options(sub.add_parser(name, help=action.help, description=action.description))


def _init_ca_options(init: argparse.ArgumentParser) -> None:
    init.add_argument("--dir", type=Path, required=True, help="the CA directory (created 0700 if missing)")
    init.add_argument("--cn", default=pki.DEFAULT_CA_CN, help="the CA's common name (default: %(default)s)")
    init.add_argument(
        "--days", type=whole(1), default=pki.DEFAULT_CA_DAYS, help="validity (default: %(default)s)"
    )
    init.add_argument("--force", action="store_true", help="replace an existing CA")


def _csr_options(csr: argparse.ArgumentParser) -> None:
    csr.add_argument("--key", type=Path, required=True, help="the private key (created if missing)")
    csr.add_argument("--csr", type=Path, required=True, help="where to write the request")
    csr.add_argument("--cn", required=True, help="common name: the identity (e.g. node name, npudure-admin)")
    csr.add_argument(
        "--san",
        action="extend",
        nargs="+",
        default=[],
        metavar="IP_OR_DNS",
        help="subject alternative names: IP addresses and/or DNS names clients dial (repeatable)",
    )
    csr.add_argument("--owner", help="give a new or existing key to this user (e.g. npudure)")
    csr.add_argument("--group", help="give a new or existing key to this group")
    csr.add_argument("--new-key", action="store_true", help="replace the key instead of reusing it")


def _sign_options(sign: argparse.ArgumentParser) -> None:
    sign.add_argument("--ca-dir", type=Path, required=True, help="the CA directory (ca.key, ca.crt)")
    sign.add_argument("--csr", type=Path, required=True, help="the host's certificate request")
    sign.add_argument("--out", type=Path, required=True, help="where to write the certificate")
    sign.add_argument(
        "--days", type=whole(1), default=pki.DEFAULT_LEAF_DAYS, help="validity (default: %(default)s)"
    )
    usage = sign.add_mutually_exclusive_group()
    usage.add_argument(
        "--client-only",
        dest="usage",
        action="store_const",
        const="client-only",
        help="extendedKeyUsage clientAuth only (admin and tool certificates)",
    )
    usage.add_argument(
        "--server-and-client",
        dest="usage",
        action="store_const",
        const="server-and-client",
        help="serverAuth + clientAuth (the default: agents serve and the scheduler both serves and dials)",
    )
    sign.set_defaults(usage="server-and-client")


def _check_options(check: argparse.ArgumentParser) -> None:
    check.add_argument("--cert", type=Path, required=True, help="the certificate to check")
    check.add_argument("--ca", type=Path, help="the CA certificate it must be signed by")
    check.add_argument("--key", type=Path, help="the private key it must match")
    check.add_argument(
        "--min-days",
        type=whole(0),
        default=pki.DEFAULT_MIN_DAYS,
        help="days left below which to rotate (default: 30)",
    )
    check.add_argument("--cn", help="the CN it must have")
    check.add_argument(
        "--san", action="extend", nargs="+", default=[], metavar="IP_OR_DNS", help="SANs it must have"
    )
    check.add_argument(
        "--issuer",
        choices=("any", "first"),
        default="any",
        help="with a CA bundle: accept a certificate signed by any of its CAs (default), or only by the "
        "first, the one that issues now (a CA rotation's switch re-issues the others)",
    )
    check.add_argument("--json", action="store_true", help="print a machine-readable JSON object")


def _rotate_ca_options(rotate: argparse.ArgumentParser) -> None:
    rotate.add_argument("--dir", type=Path, required=True, help="the fleet CA directory (ca.key, ca.crt)")
    rotate.add_argument("--phase", choices=ca_rotation.PHASES, required=True, help="the phase to run")


def _revoke_options(revoke: argparse.ArgumentParser) -> None:
    revoke.add_argument("--ca-dir", type=Path, required=True, help="the CA directory (ca.key, ca.crt)")
    which = revoke.add_mutually_exclusive_group(required=True)
    which.add_argument("--cert", type=Path, help="the certificate to revoke")
    which.add_argument("--serial", help="its serial, hex (as openssl x509 -noout -serial prints it)")
    revoke.add_argument(
        "--days",
        type=whole(1),
        default=crl.DEFAULT_CRL_DAYS,
        help="days until the CRL's next update (default: %(default)s)",
    )


def run(args: argparse.Namespace) -> int:
    try:
        return _ACTIONS[args.pki_command].run(args)
    except pki.PkiError as exc:
        print(f"npudure pki {args.pki_command}: {exc}", file=sys.stderr)
        return 1


def _init_ca(args: argparse.Namespace) -> int:
    ca = pki.make_ca(args.dir, cn=args.cn, days=args.days, force=args.force)
    if not ca.changed:
        print(f"unchanged: {ca.cert} is a valid CA")
        if ca.note:
            print(f"note: {ca.note}")
        return 0
    cert = pki.load_certificate(ca.cert)
    print(f"created {ca.key} (0600) and {ca.cert}, valid until {cert.not_valid_after_utc:%Y-%m-%d}")
    print(f"keep {ca.key} on this machine only; copy {ca.cert} to every host")
    return 0


def _csr(args: argparse.Namespace) -> int:
    made = pki.make_csr(args.key, args.csr, args.cn, args.san, args.owner, args.group, args.new_key)
    key_state = "created" if made.key_created else "reused"
    print(
        f"key {made.key} {key_state}; wrote {made.csr} (CN={args.cn}, SANs: {', '.join(args.san) or 'none'})"
    )
    return 0


def _sign(args: argparse.Namespace) -> int:
    signed = pki.sign(args.ca_dir, args.csr, args.out, days=args.days, usage=args.usage)
    print(
        f"wrote {signed.cert} (CN={signed.cn}, SANs: {', '.join(signed.sans) or 'none'}, {args.usage}), "
        f"valid until {signed.not_after:%Y-%m-%d}"
    )
    if signed.capped:
        print("note: shortened to end with the CA certificate; renew the CA before then", file=sys.stderr)
    if args.usage == "server-and-client" and not signed.sans:
        print(
            "warning: no SANs: clients verifying this server by address will reject it; for a server, "
            "make the CSR with --san <its IP or name>",
            file=sys.stderr,
        )
    return 0


def _check(args: argparse.Namespace) -> int:
    result = pki.check_certificate(
        args.cert,
        ca=args.ca,
        key=args.key,
        min_days=args.min_days,
        cn=args.cn,
        sans=args.san,
        issuer=args.issuer,
    )
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    elif result.ok:
        print(
            f"ok: {args.cert} (CN={result.cn}, SANs: {', '.join(result.sans) or 'none'}), "
            f"{result.days_left} days left"
        )
    else:
        print(f"{args.cert} needs attention:")
        for reason in result.reasons:
            print(f"  - {reason}")
    return 0 if result.ok else 1


def _rotate_ca(args: argparse.Namespace) -> int:
    step = ca_rotation.advance(args.dir, args.phase)
    print(f"{'changed' if step.changed else 'unchanged'}: {args.phase}: {step.message}")
    return 0


def _revoke(args: argparse.Namespace) -> int:
    done = crl.revoke(args.ca_dir, cert=args.cert, serial=args.serial, days=args.days)
    serial = crl.serial_text(done.serial)
    if not done.added and not done.written:
        print(f"unchanged: serial {serial} is already on {done.crl} ({done.count} revoked)")
        return 0
    what = f"revoked serial {serial}" if done.added else f"serial {serial} was revoked already; re-signed"
    print(
        f"{what}: {done.crl} lists {done.count} certificate(s), next update {done.next_update:%Y-%m-%d}; "
        "copy it to every host and reload the scheduler"
    )
    return 0


@dataclass(frozen=True)
class _Action:
    """One ``npudure pki`` action: its help line and description, its options and what runs it."""

    help: str
    description: str
    options: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


# In the order `npudure pki --help` lists them.
_ACTIONS = {
    "init-ca": _Action(
        help="create the CA (ca.key 0600 + self-signed ca.crt); keeps a valid existing one",
        description="Create DIR/ca.key (EC P-256, mode 0600) and a self-signed DIR/ca.crt. An existing "
        "valid CA is kept and reported unchanged; --force replaces it (every issued certificate must then "
        "be re-issued).",
        options=_init_ca_options,
        run=_init_ca,
    ),
    "csr": _Action(
        help="on a host: create its private key if missing and write a certificate request",
        description="Create the private key (EC P-256, mode 0600) unless it exists, and write a CSR with "
        "the CN and SANs. An existing key is reused, so rotating a certificate keeps the key unless "
        "--new-key is given.",
        options=_csr_options,
        run=_csr,
    ),
    "sign": _Action(
        help="on the controller: issue a certificate for a CSR, signed by the CA",
        description="Issue a leaf certificate (CA:FALSE) with the CSR's CN, SANs and public key. Nothing "
        "else in the CSR is honoured.",
        options=_sign_options,
        run=_sign,
    ),
    "check": _Action(
        help="is this certificate fine? exit 0 yes, 1 no (with every reason)",
        description="Check that the certificate is valid now, signed by the CA, matches the key, carries "
        "the CN and SANs asked for, and has at least --min-days whole days left. Exit 1 lists every reason.",
        options=_check_options,
        run=_check,
    ),
    "rotate-ca": _Action(
        help="on the controller: a CA rotation's phase (start, switch, finish); re-runnable",
        description="start: make a new CA in DIR/next and DIR/trust.crt = old + new (the old one issues). "
        "switch: the new CA issues, both trusted. finish: the new CA becomes DIR/ca.*, trust.crt = new "
        "alone, the old CA is kept in DIR/retired/. A phase out of order is refused; playbooks/rotate-ca.yml "
        "runs each and rolls the fleet.",
        options=_rotate_ca_options,
        run=_rotate_ca,
    ),
    "revoke": _Action(
        help="on the controller: list a certificate on the CA's CRL (crl.pem); the services refuse it",
        description="Add the certificate (its file, which must be issued by this CA, or its serial) to "
        "DIR/crl.pem, signed by the CA, with a next update --days ahead. Revoking a listed certificate "
        "again changes nothing (the CRL is re-signed only when its next update is under 30 days away). "
        "Copy crl.pem to every host (the npudure_tls role does) and reload the scheduler; agents read it "
        "when they start.",
        options=_revoke_options,
        run=_revoke,
    ),
}
