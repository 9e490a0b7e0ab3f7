"""Requests that are not the protobuf their method takes: INVALID_ARGUMENT and one log line, no traceback.

grpcio parses a request with the method's deserializer before the servicer runs; when that fails it
logs a traceback and answers UNKNOWN, per request, for anyone. ``StrictDecoding`` takes the parsing
over for every method that has a deserializer (Cluster.*, Node.*, Health.*, reflection): the bytes are
parsed here, and bad ones get INVALID_ARGUMENT with a warning at most once per ``LOG_EVERY_S``.
Methods without a deserializer (Infer, which parses its own bytes) are left as they are.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

log = logging.getLogger(__name__)

LOG_EVERY_S = 10.0

# The servicer's handlers, type-erased: grpc-stubs types RpcMethodHandler's callables as synchronous,
# while grpc.aio's are coroutines or async generators, and each method has its own message types.
_Handler = Any
_Context = grpc.aio.ServicerContext[Any, Any]
_Parse = Callable[[bytes, _Context], Awaitable[object]]


class _RateLimitedLog:
    def __init__(self, every_s: float) -> None:
        self.every_s = every_s
        self.last = float("-inf")
        self.suppressed = 0

    def warn(self, method: str, peer: str, error: Exception) -> None:
        now = time.monotonic()
        if now - self.last < self.every_s:
            self.suppressed += 1
            return
        more = f" ({self.suppressed} more since the last line)" if self.suppressed else ""
        log.warning("malformed %s request from %s: %s%s", method, peer, _short(error), more)
        self.last, self.suppressed = now, 0


def _short(error: Exception) -> str:
    text = str(error) or type(error).__name__
    return text if len(text) <= 200 else text[:200] + "..."


class StrictDecoding(grpc.aio.ServerInterceptor):
    def __init__(self, log_every_s: float = LOG_EVERY_S) -> None:
        self._log = _RateLimitedLog(log_every_s)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any] | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = await continuation(handler_call_details)
        if handler is None or handler.request_deserializer is None:
            return handler
        method = handler_call_details.method
        parse = self._parser(method, handler.request_deserializer)
        serialize = handler.response_serializer
        if handler.unary_unary:
            inner: _Handler = handler.unary_unary

            async def unary_unary(request: bytes, context: _Context) -> object:
                return await inner(await parse(request, context), context)

            return grpc.unary_unary_rpc_method_handler(unary_unary, None, serialize)
        if handler.unary_stream:
            return grpc.unary_stream_rpc_method_handler(
                _unary_stream(handler.unary_stream, parse), None, serialize
            )
        iterate = _stream_parser(parse)
        if handler.stream_unary:
            inner_su: _Handler = handler.stream_unary

            async def stream_unary(requests: AsyncIterator[bytes], context: _Context) -> object:
                return await inner_su(iterate(requests, context), context)

            return grpc.stream_unary_rpc_method_handler(stream_unary, None, serialize)
        inner_ss: _Handler = handler.stream_stream  # the only kind left: not None
        if inspect.isasyncgenfunction(inner_ss):

            async def stream_stream(
                requests: AsyncIterator[bytes], context: _Context
            ) -> AsyncIterator[object]:
                async for reply in inner_ss(iterate(requests, context), context):
                    yield reply

        else:

            async def stream_stream(  # type: ignore[misc]  # the other branch's async generator
                requests: AsyncIterator[bytes], context: _Context
            ) -> object:
                return await inner_ss(iterate(requests, context), context)

        return grpc.stream_stream_rpc_method_handler(stream_stream, None, serialize)

    def _parser(self, method: str, deserialize: Callable[[bytes], object]) -> _Parse:
        async def parse(request: bytes, context: _Context) -> object:
            try:
                return deserialize(request)
            except Exception as exc:  # DecodeError, and anything a parser raises on hostile bytes
                self._log.warn(method, context.peer(), exc)
                await context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"the request is not a valid message for {method}: {_short(exc)}",
                )

        return parse


def _unary_stream(inner: _Handler, parse: _Parse) -> _Handler:
    if inspect.isasyncgenfunction(inner):

        async def generator(request: bytes, context: _Context) -> AsyncIterator[object]:
            async for reply in inner(await parse(request, context), context):
                yield reply

        return generator

    async def writer(request: bytes, context: _Context) -> object:  # the servicer writes with context.write()
        return await inner(await parse(request, context), context)

    return writer


def _stream_parser(parse: _Parse) -> Callable[[AsyncIterator[bytes], _Context], AsyncIterator[object]]:
    async def iterate(requests: AsyncIterator[bytes], context: _Context) -> AsyncIterator[object]:
        async for request in requests:
            yield await parse(request, context)

    return iterate


class _CallEndedFilter(logging.Filter):
    """grpcio logs an ERROR with a traceback when a call ends (its deadline passes, its connection is
    closed) while the servicer is answering it: a client's doing, not a server fault. One INFO line
    without the traceback instead, at most once per ``LOG_EVERY_S``."""

    def __init__(self) -> None:
        super().__init__()
        self._last = float("-inf")

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith("ExecuteBatchError raised in core"):
            return True
        now = time.monotonic()
        if now - self._last < LOG_EVERY_S:
            return False
        self._last = now
        record.levelno, record.levelname = logging.INFO, "INFO"
        record.msg = f"{record.getMessage()}: the call ended while its answer was sent (more muted)"
        record.args, record.exc_info, record.exc_text = (), None, None
        return True


_CALL_ENDED = _CallEndedFilter()


def quiet_call_ended_errors() -> None:
    """Install the filter on grpcio's aio server logger (idempotent)."""
    logger = logging.getLogger("grpc._cython.cygrpc")
    if _CALL_ENDED not in logger.filters:
        logger.addFilter(_CALL_ENDED)
