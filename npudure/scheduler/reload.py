"""``npudure scheduler --config FILE --reload``: the unit's ExecReload (``systemctl reload``).

Validates FILE here first (a bad file never reaches the scheduler), then asks the running scheduler
to apply it (admin RPC ReloadBoards, with the config's own TLS identity and admin tokens). Prints one
line either way, so the journal says what happened; a non-zero exit fails ``systemctl reload``.

Every token of the file is sent (up to ``MAX_SENT_TOKENS``): in a rotation the file has just gained
or lost a line and the running scheduler holds the other set; whichever it accepts, the reload then
makes it re-read the file, and it accepts exactly the file's tokens from then on.
"""

from __future__ import annotations

import sys

import grpc
from cryptography import x509

from npudure.client.handover_retry import retrying
from npudure.config import SchedulerConfig
from npudure.proto import inference_pb2 as pb
from npudure.proto import inference_pb2_grpc as rpc
from npudure.scheduler.address import split as split_address
from npudure.scheduler.membership import ReloadError, read_config
from npudure.security import access as security
from npudure.service.runtime import EX_CONFIG

PREFIX = "npudure scheduler: reload"


def local_target(listen: str) -> str:
    """Where this host reaches its own scheduler: the listen address, loopback for a wildcard."""
    ip, _, port = split_address(listen)
    if ip is not None and ip.is_unspecified:
        return f"[::1]:{port}" if ip.version == 6 else f"127.0.0.1:{port}"
    return listen


def _cert_name(path: str) -> str | None:
    """The first name the scheduler's own certificate is issued for (what we check it against)."""
    cert = x509.load_pem_x509_certificate(open(path, "rb").read())  # noqa: SIM115
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        names = None
    for name in names or ():
        if isinstance(name, (x509.DNSName, x509.IPAddress)):
            return str(name.value)
    cn = cert.subject.get_attributes_for_oid(x509.oid.NameOID.COMMON_NAME)
    return str(cn[0].value) if cn else None


def _channel(config: SchedulerConfig) -> grpc.Channel:
    target = local_target(config.listen)
    if config.tls is None:
        return grpc.insecure_channel(target)
    options = []
    name = _cert_name(config.tls.cert)
    if name:
        options.append(("grpc.ssl_target_name_override", name))
    return grpc.secure_channel(target, security.channel_credentials(config.tls), options=options)


def summary(reply: pb.ReloadBoardsReply) -> str:
    parts = [
        f"added {', '.join(reply.added) or 'none'}",
        f"removing {', '.join(reply.removed) or 'none'}"
        + (" (draining; they leave when idle)" if reply.removed else ""),
        f"policy {reply.policy or 'unchanged'}",
    ]
    if reply.admin_tokens:
        parts.append(f"{reply.admin_tokens} admin token(s) accepted")
    if reply.revoked_certificates:
        parts.append(f"{reply.revoked_certificates} certificate(s) revoked")
    if reply.restart_needed:
        parts.append(f"these take effect at the next restart: {', '.join(reply.restart_needed)}")
    return "; ".join(parts)


def run(config_path: str, timeout_s: float = 15.0) -> int:
    try:
        config = read_config(config_path)
        tokens = security.read_tokens(config.admin.token_file) if config.admin.token_file else []
        channel = _channel(config)
    except (ReloadError, security.SecurityError, OSError, ValueError) as exc:
        print(f"{PREFIX} refused, the scheduler keeps its current boards: {exc}", file=sys.stderr)
        return EX_CONFIG
    metadata = tuple(("authorization", f"Bearer {t}") for t in tokens[: security.MAX_SENT_TOKENS])
    with channel:
        try:
            # Repeated while the scheduler hands over (UNAVAILABLE): the successor gets it then.
            reply = retrying(
                lambda: rpc.ClusterStub(channel).ReloadBoards(
                    pb.ReloadBoardsRequest(), timeout=timeout_s, metadata=metadata
                )
            )
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.INVALID_ARGUMENT:
                print(
                    f"{PREFIX} refused, the scheduler keeps its current boards: {exc.details()}",
                    file=sys.stderr,
                )
                return EX_CONFIG
            print(
                f"{PREFIX} failed: the scheduler at {local_target(config.listen)} answered "
                f"{exc.code().name}: {exc.details()}",
                file=sys.stderr,
            )
            return 1
    print(f"{PREFIX}ed {config_path}: {summary(reply)}")
    return 0
