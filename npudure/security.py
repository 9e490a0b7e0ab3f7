"""Optional mutual TLS and the admin check, shared by the agent, the scheduler and every client.

Plaintext is the default (a closed lab network). With a ``tls:`` section a server accepts only
peers whose certificate is signed by the configured CA. Admin RPCs additionally need the admin
identity (certificate CN) or, without TLS, the token from a file only its owner can read.

Clients (npudure status/infer/bench, the scheduler towards agents) take their TLS files and admin token
from the environment: NPUDURE_TLS_CA, NPUDURE_TLS_CERT, NPUDURE_TLS_KEY, NPUDURE_ADMIN_TOKEN_FILE.
"""

from __future__ import annotations

import hmac
import os
import stat
from collections.abc import Sequence
from pathlib import Path

import grpc

from npudure.config import AdminConfig, TlsConfig

ENV_CA, ENV_CERT, ENV_KEY, ENV_TOKEN = (
    "NPUDURE_TLS_CA",
    "NPUDURE_TLS_CERT",
    "NPUDURE_TLS_KEY",
    "NPUDURE_ADMIN_TOKEN_FILE",
)


class SecurityError(Exception):
    """A TLS or token file problem, worded with the fix."""


def _read(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise SecurityError(
            f"cannot read the {what} {path}: {exc.strerror} (check tls: in the config)"
        ) from None


def read_token(path: str) -> str:
    """The admin token; refused when group or others can read the file."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise SecurityError(f"cannot read the admin token file {path}: {exc.strerror}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise SecurityError(f"admin token file {path} is readable by others: chmod 600 {path}")
    token = Path(path).read_text().strip()
    if len(token) < 16:
        raise SecurityError(f"admin token in {path} is shorter than 16 characters: write a long random one")
    return token


# ---------------------------------------------------------------------- servers
def add_port(server: grpc.aio.Server, listen: str, tls: TlsConfig | None) -> int:
    if tls is None:
        return server.add_insecure_port(listen)
    credentials = grpc.ssl_server_credentials(
        [(_read(tls.key, "TLS key"), _read(tls.cert, "TLS certificate"))],
        root_certificates=_read(tls.ca, "CA certificate"),
        require_client_auth=True,
    )
    return server.add_secure_port(listen, credentials)


class AdminGuard:
    def __init__(self, admin: AdminConfig, tls: TlsConfig | None) -> None:
        self.identities = {i.encode() for i in admin.identities}
        self.tls = tls is not None
        self.token = read_token(admin.token_file) if admin.token_file else None
        self.open = not self.tls and self.token is None

    def allows(self, context: grpc.aio.ServicerContext) -> bool:
        if self.open:
            return True
        if self.tls:
            names = context.auth_context().get("x509_common_name", [])
            if any(name in self.identities for name in names):
                return True
        if self.token is not None:
            sent = dict(context.invocation_metadata() or ()).get("authorization", "")
            if hmac.compare_digest(sent.encode(), f"Bearer {self.token}".encode()):
                return True
        return False

    async def check(self, context: grpc.aio.ServicerContext, rpc_name: str) -> None:
        if not self.allows(context):
            how = "a client certificate whose CN is an admin identity" if self.tls else ""
            if self.token is not None:
                how = (how + " or " if how else "") + "the admin token (NPUDURE_ADMIN_TOKEN_FILE)"
            await context.abort(
                grpc.StatusCode.PERMISSION_DENIED, f"{rpc_name} is an admin call: it needs {how}"
            )


# ---------------------------------------------------------------------- clients
def client_tls() -> TlsConfig | None:
    """TLS files for outgoing calls, from the environment (all three or none)."""
    values = [os.environ.get(k) for k in (ENV_CA, ENV_CERT, ENV_KEY)]
    if not any(values):
        return None
    if not all(values):
        raise SecurityError(f"set all of {ENV_CA}, {ENV_CERT} and {ENV_KEY} for mutual TLS, or none")
    return TlsConfig(ca=values[0], cert=values[1], key=values[2])


def channel_credentials(tls: TlsConfig) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(
        root_certificates=_read(tls.ca, "CA certificate"),
        private_key=_read(tls.key, "TLS key"),
        certificate_chain=_read(tls.cert, "TLS certificate"),
    )


def _token_metadata() -> tuple[tuple[str, str], ...]:
    path = os.environ.get(ENV_TOKEN)
    return _bearer(read_token(path)) if path else ()


class _Metadata(grpc.UnaryUnaryClientInterceptor):
    def __init__(self, metadata: tuple[tuple[str, str], ...]) -> None:
        self.metadata = metadata

    def intercept_unary_unary(self, continuation, details, request):
        details = details._replace(metadata=(*(details.metadata or ()), *self.metadata))
        return continuation(details, request)


class _AioMetadata(grpc.aio.UnaryUnaryClientInterceptor):
    def __init__(self, metadata: tuple[tuple[str, str], ...]) -> None:
        self.metadata = metadata

    async def intercept_unary_unary(self, continuation, details, request):
        details = details._replace(metadata=(*(details.metadata or ()), *self.metadata))
        return await continuation(details, request)


def _bearer(token: str | None) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),) if token else ()


def channel(target: str, options: Sequence[tuple[str, object]] = ()) -> grpc.Channel:
    """A blocking client channel with the caller's TLS identity and admin token (from the environment)."""
    tls = client_tls()
    base = (
        grpc.secure_channel(target, channel_credentials(tls), options=list(options))
        if tls
        else grpc.insecure_channel(target, options=list(options))
    )
    metadata = _token_metadata()
    return grpc.intercept_channel(base, _Metadata(metadata)) if metadata else base


def aio_channel(
    target: str,
    options: Sequence[tuple[str, object]] = (),
    tls: TlsConfig | None = None,
    token: str | None = None,
    from_env: bool = True,
) -> grpc.aio.Channel:
    """An asyncio channel: TLS identity and admin token given, or (``from_env``) from the environment."""
    if from_env:
        tls = tls or client_tls()
        metadata = _token_metadata() or _bearer(token)
    else:
        metadata = _bearer(token)
    interceptors = [_AioMetadata(metadata)] if metadata else None
    if tls:
        return grpc.aio.secure_channel(
            target, channel_credentials(tls), options=list(options), interceptors=interceptors
        )
    return grpc.aio.insecure_channel(target, options=list(options), interceptors=interceptors)
