"""Optional mutual TLS and the admin check, shared by the agent, the scheduler and every client.

Plaintext is the default for the data path (a closed lab network). With a ``tls:`` section a server
accepts only peers whose certificate is signed by the configured CA. Admin RPCs always need
credentials: the admin identity (certificate CN) or the token from a file only its owner can read; a
server configured with neither refuses every admin RPC unless ``admin.insecure_open`` says otherwise.

Clients (npudure status/infer/bench, the scheduler towards agents) take their TLS files and admin token
from the environment: NPUDURE_TLS_CA, NPUDURE_TLS_CERT, NPUDURE_TLS_KEY, NPUDURE_ADMIN_TOKEN_FILE; the
token falls back to ~/.config/npudure/admin-token when that file exists (``site.yml`` and
``npudure local`` write it there).
"""

from __future__ import annotations

import hmac
import logging
import os
import secrets
import stat
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import grpc

from npudure.config import AdminConfig, TlsConfig
from npudure.proto import contract
from npudure.service.handlers import LOG_EVERY_S, RateLimitedLog

log = logging.getLogger(__name__)

# A name every agent's certificate carries besides its own addresses (the npudure_tls role adds it): a
# proxyless channel reaches all boards through one target, and checks each board's certificate
# against this one name instead of a per-board address.
AGENT_FLEET_NAME = "npudure-agents"
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
    """The admin token this process sends: the first of ``read_tokens``."""
    return read_tokens(path)[0]


def read_tokens(path: str) -> list[str]:
    """The admin tokens in ``path``, one per line (blank lines and ``#`` comments skipped); refused
    when group or others can read the file. Servers accept every one: old and new overlap during a
    rotation.

    ``$VARS`` in the path are expanded: the units name systemd's copy as
    ``${CREDENTIALS_DIRECTORY}/admin-token`` (LoadCredential=), so the original stays root's.
    """
    path = os.path.expandvars(path)
    if "$" in path:
        raise SecurityError(
            f"the admin token file {path} names an unset environment variable (under systemd, "
            "LoadCredential=admin-token:... in the unit sets $CREDENTIALS_DIRECTORY)"
        )
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise SecurityError(f"cannot read the admin token file {path}: {exc.strerror}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise SecurityError(f"admin token file {path} is readable by others: chmod 600 {path}")
    lines = (line.strip() for line in Path(path).read_text().splitlines())
    tokens = [line for line in lines if line and not line.startswith("#")]
    if not tokens:
        raise SecurityError(f"admin token file {path} holds no token: write a long random one")
    for number, token in enumerate(tokens, 1):
        if len(token) < 16:
            raise SecurityError(
                f"admin token {number} in {path} is shorter than 16 characters: write a long random one"
            )
    return tokens


def default_token_file() -> Path:
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "npudure" / "admin-token"


def write_token(path: Path) -> Path:
    """Write a new long random token, readable by its owner only (the folder too)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(secrets.token_urlsafe(36) + "\n")
    path.chmod(0o600)
    return path


def ensure_token(path: Path) -> Path:
    """The token at ``path``, made first when there is none."""
    return path if path.exists() else write_token(path)


# ---------------------------------------------------------------------- servers
class ListenError(Exception):
    """The listen address cannot be bound (in use, or not an address of this host)."""


def add_port(server: grpc.aio.Server, listen: str, tls: TlsConfig | None) -> int:
    """Bind ``listen``; raise ListenError with the reason (servers are made with SO_REUSEPORT off)."""
    try:
        if tls is None:
            port = server.add_insecure_port(listen)
        else:
            credentials = grpc.ssl_server_credentials(
                [(_read(tls.key, "TLS key"), _read(tls.cert, "TLS certificate"))],
                root_certificates=_read(tls.ca, "CA certificate"),
                require_client_auth=True,
            )
            port = server.add_secure_port(listen, credentials)
    except RuntimeError:
        port = 0
    if port == 0:
        raise ListenError(
            f"cannot listen on {listen}: the port is already in use (another agent or scheduler?) "
            "or the address is not local"
        )
    return port


class AdminTokens:
    """The admin tokens a server accepts (every line of its file) and sends (the first), re-read
    in place by ``reload``: a rotation reaches a running scheduler without a restart
    (``systemctl reload``; docs/operations.md). Empty when the server has no token file."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.values: list[str] = read_tokens(path) if path else []

    @property
    def first(self) -> str | None:
        return self.values[0] if self.values else None

    def reload(self) -> int:
        """Re-read the file; SecurityError (and the current tokens kept) when it is unusable. Returns
        how many tokens are accepted now."""
        if self.path:
            self.values = read_tokens(self.path)
        return len(self.values)


# A client may send several tokens (the scheduler's --reload sends every line of its file: during a
# rotation it cannot know which one the running server holds); more than this is not looked at.
MAX_SENT_TOKENS = 4


class AdminGuard:
    def __init__(self, admin: AdminConfig, tls: TlsConfig | None, tokens: AdminTokens | None = None) -> None:
        self.identities = {i.encode() for i in admin.identities}
        self.tls = tls is not None
        self.admin_tokens = tokens if tokens is not None else AdminTokens(admin.token_file)
        self.open = admin.insecure_open
        self.refused: Counter[str] = Counter()  # by RPC name, for npudure_admin_refused_total
        # One limiter per admin RPC (a handful, named by the server): a caller in a loop cannot fill the
        # journal, and the first refusal of each RPC is still logged.
        self._refusals: dict[str, RateLimitedLog] = {}
        if self.open:
            log.warning("admin.insecure_open: admin RPCs are open to anyone who can reach this server")
        elif not self.tls and self.token is None:
            log.warning(
                "no admin.token_file and no tls: every admin RPC will be refused (set admin.token_file)"
            )

    @property
    def tokens(self) -> list[str]:
        return self.admin_tokens.values

    @property
    def token(self) -> str | None:
        return self.admin_tokens.first

    def allows(self, context: grpc.aio.ServicerContext) -> bool:
        if self.open:
            return True
        if self.tls:
            names = context.auth_context().get("x509_common_name", [])
            if any(name in self.identities for name in names):
                return True
        if self.tokens:
            values = [v for k, v in context.invocation_metadata() or () if k == "authorization"]
            # Every pair compared (no early exit): the time taken does not tell which one matched.
            matches = [
                hmac.compare_digest(v.encode() if isinstance(v, str) else v, f"Bearer {t}".encode())
                for v in values[:MAX_SENT_TOKENS]
                for t in self.tokens
            ]
            if any(matches):
                return True
        return False

    async def check(self, context: grpc.aio.ServicerContext, rpc_name: str) -> None:
        if self.allows(context):
            return
        self.refused[rpc_name] += 1
        limited = self._refusals.get(rpc_name)
        if limited is None:
            limited = self._refusals[rpc_name] = RateLimitedLog(log, LOG_EVERY_S)
        limited.warn("refused admin call %s from %s: no valid admin credentials", rpc_name, context.peer())
        how = "a client certificate whose CN is an admin identity" if self.tls else ""
        if self.token is not None:
            how = (how + " or " if how else "") + (
                "the admin token (NPUDURE_ADMIN_TOKEN_FILE, or ~/.config/npudure/admin-token)"
            )
        if not how:
            how = "credentials, and this server has none configured (set admin.token_file or tls)"
        await context.abort(grpc.StatusCode.PERMISSION_DENIED, f"{rpc_name} is an admin call: it needs {how}")


# ---------------------------------------------------------------------- clients
def client_tls() -> TlsConfig | None:
    """TLS files for outgoing calls, from the environment (all three or none)."""
    values = [os.environ.get(k) for k in (ENV_CA, ENV_CERT, ENV_KEY)]
    if not any(values):
        return None
    if not all(values):
        raise SecurityError(f"set all of {ENV_CA}, {ENV_CERT} and {ENV_KEY} for mutual TLS, or none")
    return TlsConfig(ca=values[0], cert=values[1], key=values[2])


def tls_hint(exc: grpc.RpcError) -> str:
    """A hint for the one failure plaintext clients meet against a TLS server: a closed socket."""
    details = (exc.details() or "").lower()
    if (
        exc.code() == grpc.StatusCode.UNAVAILABLE
        and client_tls() is None
        and ("socket closed" in details or "connection reset" in details or "handshake" in details)
    ):
        return (
            f"; if the server speaks TLS, pass its CA and your certificate: {ENV_CA}, {ENV_CERT} and "
            f"{ENV_KEY} (docs/security.md)"
        )
    return ""


def channel_credentials(tls: TlsConfig) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(
        root_certificates=_read(tls.ca, "CA certificate"),
        private_key=_read(tls.key, "TLS key"),
        certificate_chain=_read(tls.cert, "TLS certificate"),
    )


def client_token_file() -> str | None:
    """NPUDURE_ADMIN_TOKEN_FILE, else the default file when it exists."""
    path = os.environ.get(ENV_TOKEN)
    if path:
        return path
    default = default_token_file()
    return str(default) if default.is_file() else None


def _token_metadata() -> tuple[tuple[str, str], ...]:
    path = client_token_file()
    return _bearer(read_token(path)) if path else ()


class _Metadata(grpc.UnaryUnaryClientInterceptor):
    def __init__(self, metadata: tuple[tuple[str, str], ...]) -> None:
        self.metadata = metadata

    def intercept_unary_unary(
        self,
        continuation: Callable[[grpc.ClientCallDetails, Any], Any],
        details: grpc.ClientCallDetails,
        request: Any,
    ) -> Any:
        # A namedtuple at runtime; the stubs do not declare _replace.
        details = details._replace(metadata=(*(details.metadata or ()), *self.metadata))  # type: ignore[attr-defined]
        return continuation(details, request)


# The agents' admin RPCs: the only calls from the scheduler that need its admin token.
NODE_ADMIN_METHODS = frozenset(
    f"/{contract.NODE}/{name}" for name in ("SetCpuCap", "SetServing", "InjectFault")
)


class _AioMetadata(grpc.aio.UnaryUnaryClientInterceptor):
    def __init__(
        self,
        metadata: tuple[tuple[str, str], ...] | Callable[[], tuple[tuple[str, str], ...]],
        methods: frozenset[str] | None = None,
    ) -> None:
        self._metadata = metadata  # a function: read at each call (a token reloaded in place)
        self.methods = methods  # None: every call

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata() if callable(self._metadata) else self._metadata

    async def intercept_unary_unary(
        self,
        continuation: Callable[[grpc.aio.ClientCallDetails, Any], Awaitable[Any]],
        details: grpc.aio.ClientCallDetails,
        request: Any,
    ) -> Any:
        method = details.method.decode() if isinstance(details.method, bytes) else details.method
        if self.methods is None or method in self.methods:
            # A namedtuple at runtime; the stubs do not declare _replace.
            details = details._replace(metadata=(*(details.metadata or ()), *self.metadata))  # type: ignore[attr-defined]
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
    token_methods: frozenset[str] | None = None,
    tokens: AdminTokens | None = None,
) -> grpc.aio.Channel:
    """An asyncio channel: TLS identity and admin token given, or (``from_env``) from the environment.

    With ``token_methods`` the token goes only on those calls (the scheduler's channels to the boards:
    never on forwarded frames or status polls, which anything on the board network could read).
    With ``tokens`` (not from the environment) the first of them at each call: reloaded in place."""
    metadata: tuple[tuple[str, str], ...] | Callable[[], tuple[tuple[str, str], ...]]
    if tokens is not None:
        source = tokens
        metadata = lambda: _bearer(source.first)  # noqa: E731
    elif from_env:
        tls = tls or client_tls()
        metadata = _token_metadata() or _bearer(token)
    else:
        metadata = _bearer(token)
    interceptors = [_AioMetadata(metadata, token_methods)] if tokens is not None or metadata else None
    if tls:
        return grpc.aio.secure_channel(
            target, channel_credentials(tls), options=list(options), interceptors=interceptors
        )
    return grpc.aio.insecure_channel(target, options=list(options), interceptors=interceptors)
