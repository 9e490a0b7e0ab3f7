"""Streams (health Watch, route follow) apart from calls: their own caps, per server and per client.

A stream that stays open holds one of the server's ``maximum_concurrent_rpcs`` for as long as it
lives. Left uncapped, 1,176 idle Health.Watch streams from 5 connections took every one of a
scheduler's calls, and every Infer got RESOURCE_EXHAUSTED for up to the connection age. Capped here at
``limits.max_streams`` (all clients, default 64, half of the calls kept for control) and
``limits.max_streams_per_peer`` (one client address, default 16), a stream flood holds at most that
many, and frames and status calls always keep the rest. A refused stream ends at once
(RESOURCE_EXHAUSTED, one line naming the cap), with one log line per interval.
"""

from __future__ import annotations

import collections
import inspect
import logging
from collections.abc import AsyncIterator
from typing import Any

import grpc

from npudure.config import ServerLimits
from npudure.service.handlers import Context, Handler, MethodHandler, RateLimitedLog, WrappingInterceptor

log = logging.getLogger(__name__)


def peer_host(context: Context) -> str:
    """The client's address without its port (``ipv4:10.0.0.1:5123`` -> ``ipv4:10.0.0.1``)."""
    peer = context.peer() or "unknown"
    host, sep, port = peer.rpartition(":")
    return host if sep and port.isdigit() else peer


class StreamCap(WrappingInterceptor):
    """Admits a streaming-reply call only while the server and its client are under their caps."""

    def __init__(self, limits: ServerLimits) -> None:
        self.max_total = limits.max_streams
        self.max_per_peer = limits.max_streams_per_peer
        self.open = 0
        self.by_peer: collections.Counter[str] = collections.Counter()
        self.refused = 0
        self._log = RateLimitedLog(log)

    def wrap_handler(self, method: str, handler: MethodHandler) -> MethodHandler:
        if handler.unary_stream:
            return grpc.unary_stream_rpc_method_handler(
                self._gated(method, handler.unary_stream),
                handler.request_deserializer,
                handler.response_serializer,
            )
        if handler.stream_stream:
            return grpc.stream_stream_rpc_method_handler(
                self._gated(method, handler.stream_stream),
                handler.request_deserializer,
                handler.response_serializer,
            )
        return handler  # one reply: it ends by itself

    def _refusal(self, peer: str) -> str | None:
        if self.open >= self.max_total:
            return f"{self.open} streams are open on this server (limits.max_streams = {self.max_total})"
        if self.by_peer[peer] >= self.max_per_peer:
            return (
                f"this client holds {self.by_peer[peer]} open streams "
                f"(limits.max_streams_per_peer = {self.max_per_peer}): close some"
            )
        return None

    def _enter(self, method: str, context: Context) -> tuple[str, str | None]:
        peer = peer_host(context)
        refusal = self._refusal(peer)
        if refusal is None:
            self.open += 1
            self.by_peer[peer] += 1
        else:
            self.refused += 1
            self._log.warn("refused a %s stream from %s: %s", method, peer, refusal)
        return peer, refusal

    def _leave(self, peer: str) -> None:
        self.open -= 1
        self.by_peer[peer] -= 1
        if self.by_peer[peer] <= 0:
            del self.by_peer[peer]

    def _gated(self, method: str, inner: Handler) -> Handler:
        """``inner`` behind the caps, of the same kind (async generator, or a coroutine that writes)."""
        if inspect.isasyncgenfunction(inner):

            async def generator(request: Any, context: Context) -> AsyncIterator[object]:
                peer, refusal = self._enter(method, context)
                if refusal is not None:
                    await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, refusal)
                try:
                    async for reply in inner(request, context):
                        yield reply
                finally:
                    self._leave(peer)

            return generator

        async def writer(request: Any, context: Context) -> object:
            peer, refusal = self._enter(method, context)
            if refusal is not None:
                await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, refusal)
            try:
                return await inner(request, context)
            finally:
                self._leave(peer)

        return writer
