"""Refuse peers whose certificate is on the fleet's CRL: a gRPC server interceptor for the agent and
the scheduler.

gRPC's TLS checks the chain but not a CRL, so the check is made per call: the peer certificate from
``context.auth_context()`` (``x509_pem_cert``), its verdict cached by the certificate's bytes, so a
call costs one dict lookup once a connection's certificate has been seen. A revoked peer gets
UNAUTHENTICATED with a message naming the revocation, and the journal one warning at most every
``LOG_EVERY_S`` (with a count of those held back).

The list is read at start-up (a CRL not signed by the trusted CA, or unparseable, stops the start)
and again by ``reload`` (the scheduler's ``systemctl reload``); the cache is emptied then.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import grpc
from cryptography import x509

from npudure.config import TlsConfig
from npudure.security import crl
from npudure.service import handlers
from npudure.service.handlers import LOG_EVERY_S, RateLimitedLog

log = logging.getLogger(__name__)

# Certificates whose verdict is kept; beyond it the cache starts afresh (a fleet has a few dozen).
MAX_CACHED = 4096


class Revocations:
    """The revoked serials of one service, from its CRL file (``tls.crl``, default beside ``tls.ca``)."""

    def __init__(self, tls: TlsConfig) -> None:
        self.ca = tls.ca
        self.path = tls.crl or crl.default_crl_path(tls.ca)
        self.serials: frozenset[int] = frozenset()
        self._verdicts: dict[bytes, int | None] = {}  # PEM -> its serial when revoked, else None
        self.reload()

    def read(self) -> frozenset[int]:
        """The serials the file lists now; CrlError when it is unusable (nothing changed then)."""
        return crl.read_revoked(self.path, self.ca)

    def apply(self, serials: frozenset[int]) -> None:
        self.serials = serials
        self._verdicts = {}  # the next call of every connection is checked against the new list
        log.info("CRL %s: %d certificate(s) revoked", self.path, len(serials))

    def reload(self) -> int:
        """Re-read the CRL; CrlError (and the current list kept) when it is unusable. Returns how many
        serials are revoked now."""
        self.apply(self.read())
        return len(self.serials)

    def revoked_serial(self, pem: bytes) -> int | None:
        """The serial of the certificate ``pem`` when it is revoked, else None (cached by its bytes)."""
        try:
            return self._verdicts[pem]
        except KeyError:
            pass
        try:
            serial = x509.load_pem_x509_certificate(pem).serial_number
        except ValueError:
            serial = None  # TLS accepted it, so it parses; nothing to refuse on otherwise
        verdict = serial if serial in self.serials else None
        if len(self._verdicts) >= MAX_CACHED:
            self._verdicts = {}
        self._verdicts[pem] = verdict
        return verdict


class RevocationCheck(handlers.WrappingInterceptor):
    """Every method's handler wrapped: the peer's certificate is checked before the servicer runs.

    ``on_checked`` gets each check's thread CPU in ns (the agent counts it as its ``peer_check``
    stage: the price of the CRL on a TLS fleet, paid on the event loop by every call)."""

    def __init__(
        self,
        revocations: Revocations,
        log_every_s: float = LOG_EVERY_S,
        on_checked: Callable[[int], None] | None = None,
    ) -> None:
        self.revocations = revocations
        self._log = RateLimitedLog(log, log_every_s)  # a revoked client may retry in a tight loop
        self._on_checked = on_checked

    def _revoked_serial(self, context: handlers.Context) -> int | None:
        """The peer certificate's serial when it is revoked, else None (also without a certificate)."""
        pem = next(iter(context.auth_context().get("x509_pem_cert", ())), None)
        return None if pem is None else self.revocations.revoked_serial(pem)

    async def _check(self, context: handlers.Context) -> None:
        if self._on_checked is None:  # the clock is read only for whoever counts (a syscall on some VMs)
            serial = self._revoked_serial(context)
        else:
            start = time.thread_time_ns()
            serial = self._revoked_serial(context)
            self._on_checked(time.thread_time_ns() - start)
        if serial is None:
            return
        self._log.warn(
            "refused %s: its certificate (serial %s) is revoked", context.peer(), crl.serial_text(serial)
        )
        await context.abort(
            grpc.StatusCode.UNAUTHENTICATED,
            f"the client certificate (serial {crl.serial_text(serial)}) is revoked: it is on the fleet's "
            f"CRL ({self.revocations.path})",
        )

    def wrap_handler(self, method: str, handler: handlers.MethodHandler) -> handlers.MethodHandler:
        return handlers.wrap(handler, on_call=self._check, request_deserializer=handler.request_deserializer)
