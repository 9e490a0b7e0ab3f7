"""Refuse peers whose certificate is on the fleet's CRL: a gRPC server interceptor for the agent and
the scheduler.

gRPC's TLS checks the chain but not a CRL, so the check is made per call: the peer certificate from
``context.auth_context()`` (``x509_pem_cert``), its verdict cached by the certificate's bytes, so a
call costs one dict lookup once a connection's certificate has been seen. A revoked peer gets
UNAUTHENTICATED with a message naming the revocation.

The list is read at start-up (a CRL not signed by the trusted CA, or unparseable, stops the start)
and again by ``reload`` (the scheduler's ``systemctl reload``); the cache is emptied then.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from cryptography import x509

from npudure.config import TlsConfig
from npudure.security import crl

log = logging.getLogger(__name__)

# Certificates whose verdict is kept; beyond it the cache starts afresh (a fleet has a few dozen).
MAX_CACHED = 4096

_Handler = Any
_Context = grpc.aio.ServicerContext[Any, Any]


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


class RevocationCheck(grpc.aio.ServerInterceptor):
    """Every method's handler wrapped: the peer's certificate is checked before the servicer runs."""

    def __init__(self, revocations: Revocations) -> None:
        self.revocations = revocations

    async def _check(self, context: _Context) -> None:
        pem = next(iter(context.auth_context().get("x509_pem_cert", ())), None)
        if pem is None:
            return
        serial = self.revocations.revoked_serial(pem)
        if serial is None:
            return
        log.warning(
            "refused %s: its certificate (serial %s) is revoked", context.peer(), crl.serial_text(serial)
        )
        await context.abort(
            grpc.StatusCode.UNAUTHENTICATED,
            f"the client certificate (serial {crl.serial_text(serial)}) is revoked: it is on the fleet's "
            f"CRL ({self.revocations.path})",
        )

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any] | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        check = self._check
        parse, serialize = handler.request_deserializer, handler.response_serializer
        if handler.unary_unary:
            inner_uu: _Handler = handler.unary_unary

            async def unary_unary(request: object, context: _Context) -> object:
                await check(context)
                return await inner_uu(request, context)

            return grpc.unary_unary_rpc_method_handler(unary_unary, parse, serialize)
        if handler.stream_unary:
            inner_su: _Handler = handler.stream_unary

            async def stream_unary(requests: AsyncIterator[object], context: _Context) -> object:
                await check(context)
                return await inner_su(requests, context)

            return grpc.stream_unary_rpc_method_handler(stream_unary, parse, serialize)
        if handler.unary_stream:
            return grpc.unary_stream_rpc_method_handler(
                _streaming(handler.unary_stream, check), parse, serialize
            )
        return grpc.stream_stream_rpc_method_handler(
            _streaming(handler.stream_stream, check), parse, serialize
        )


def _streaming(inner: _Handler, check: Callable[[_Context], Awaitable[None]]) -> _Handler:
    """A streaming reply handler: an async generator stays one, one that writes with context.write() too."""
    if inspect.isasyncgenfunction(inner):

        async def generator(request: object, context: _Context) -> AsyncIterator[object]:
            await check(context)
            async for reply in inner(request, context):
                yield reply

        return generator

    async def writer(request: object, context: _Context) -> object:
        await check(context)
        return await inner(request, context)

    return writer
