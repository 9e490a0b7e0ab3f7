"""Wrap a gRPC method handler of any kind with work done before the servicer: the server interceptors'
one piece of plumbing (npudure/service/decoding.py parses requests, npudure/security/revocation.py
checks the peer).

grpc.aio hands an interceptor a handler of one of four kinds (unary or stream requests, unary or
stream replies); a streaming reply handler is an async generator or a coroutine that writes with
``context.write()``, and the wrapper must stay the same kind or grpc treats it wrongly. ``wrap``
keeps the kind and runs ``on_call`` once per call before the servicer, and ``on_request`` on every
request (the single one, or each of a stream) to produce what the servicer receives.
"""

from __future__ import annotations

import inspect
import logging
import time
from abc import abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeAlias

import grpc

# The servicer's handlers, type-erased: grpc-stubs types RpcMethodHandler's callables as synchronous,
# while grpc.aio's are coroutines or async generators, and each method has its own message types.
Handler = Any
Context = grpc.aio.ServicerContext[Any, Any]
OnCall = Callable[[Context], Awaitable[None]]
OnRequest = Callable[[Any, Context], Awaitable[object]]
MethodHandler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"  # a string: grpc has no runtime generics

# How often a RateLimitedLog may write (a hostile client's errors, per interceptor).
LOG_EVERY_S = 10.0


class WrappingInterceptor(grpc.aio.ServerInterceptor):
    """A server interceptor that puts ``wrap_handler``'s handler in place of each method's (a method
    the server does not have, a None handler, passes through)."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[MethodHandler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> MethodHandler | None:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        return self.wrap_handler(handler_call_details.method, handler)

    @abstractmethod
    def wrap_handler(self, method: str, handler: MethodHandler) -> MethodHandler:
        """The handler grpc runs for ``method`` instead of ``handler``."""


def wrap(
    handler: grpc.RpcMethodHandler[Any, Any],
    *,
    on_call: OnCall | None = None,
    on_request: OnRequest | None = None,
    request_deserializer: Callable[[bytes], object] | None,
) -> grpc.RpcMethodHandler[Any, Any]:
    """``handler`` with ``on_call`` and ``on_request`` in front; grpc parses requests with
    ``request_deserializer`` (None: the servicer, or ``on_request``, gets the bytes).

    A unary request costs one await in front of the servicer, whichever of the two are given (Infer
    under the revocation check is the agent's hot path)."""
    serialize = handler.response_serializer
    if handler.unary_unary:
        inner_uu: Handler = handler.unary_unary
        before = _before(on_call, on_request)

        async def unary_unary(request: object, context: Context) -> object:
            return await inner_uu(await before(request, context), context)

        return grpc.unary_unary_rpc_method_handler(unary_unary, request_deserializer, serialize)
    if handler.unary_stream:
        return grpc.unary_stream_rpc_method_handler(
            _streaming(handler.unary_stream, _before(on_call, on_request)), request_deserializer, serialize
        )
    # Stream requests: on_call once, in front of the stream; on_request on each request read from it.
    requests = _each(on_request)

    async def start(stream: AsyncIterator[object], context: Context) -> object:
        if on_call is not None:
            await on_call(context)
        return requests(stream, context)

    if handler.stream_unary:
        inner_su: Handler = handler.stream_unary

        async def stream_unary(stream: AsyncIterator[object], context: Context) -> object:
            return await inner_su(await start(stream, context), context)

        return grpc.stream_unary_rpc_method_handler(stream_unary, request_deserializer, serialize)
    return grpc.stream_stream_rpc_method_handler(  # the only kind left
        _streaming(handler.stream_stream, start), request_deserializer, serialize
    )


def _before(on_call: OnCall | None, on_request: OnRequest | None) -> OnRequest:
    """on_call then on_request as one step, for a handler that receives one request."""
    if on_call is None and on_request is not None:
        return on_request
    call = on_call

    async def before(request: object, context: Context) -> object:
        if call is not None:
            await call(context)
        return request if on_request is None else await on_request(request, context)

    return before


def _streaming(inner: Handler, before: OnRequest) -> Handler:
    """A streaming reply handler: an async generator stays one, one that writes with context.write() too."""
    if inspect.isasyncgenfunction(inner):

        async def generator(request: object, context: Context) -> AsyncIterator[object]:
            async for reply in inner(await before(request, context), context):
                yield reply

        return generator

    async def writer(request: object, context: Context) -> object:
        return await inner(await before(request, context), context)

    return writer


def _each(on_request: OnRequest | None) -> Callable[[AsyncIterator[object], Context], AsyncIterator[object]]:
    """``on_request`` over a request stream, as the stream the servicer reads."""
    if on_request is None:
        return lambda requests, context: requests
    parse = on_request

    async def stream(requests: AsyncIterator[object], context: Context) -> AsyncIterator[object]:
        async for request in requests:
            yield await parse(request, context)

    return stream


class RateLimitedLog:
    """A line at most once per ``every_s``, saying how many were held back since the last one: a
    hostile client must not be able to fill the journal."""

    def __init__(self, logger: logging.Logger, every_s: float = LOG_EVERY_S) -> None:
        self.logger = logger
        self.every_s = every_s
        self.last = float("-inf")
        self.suppressed = 0

    def warn(self, message: str, *args: object) -> None:
        self.log(logging.WARNING, message, *args)

    def log(self, level: int, message: str, *args: object, exc_info: bool = False) -> None:
        """``message`` at ``level`` (with the current exception's traceback when ``exc_info``), or
        counted as held back when the last line was written less than ``every_s`` ago."""
        now = time.monotonic()
        if now - self.last < self.every_s:
            self.suppressed += 1
            return
        more = f" ({self.suppressed} more since the last line)" if self.suppressed else ""
        self.logger.log(level, message + "%s", *args, more, exc_info=exc_info)
        self.last, self.suppressed = now, 0
