"""Requests that are not the protobuf their method takes: INVALID_ARGUMENT and one log line, no traceback.

grpcio parses a request with the method's deserializer before the servicer runs; when that fails it
logs a traceback and answers UNKNOWN, per request, for anyone. ``StrictDecoding`` takes the parsing
over for every method that has a deserializer (Cluster.*, Node.*, Health.*, reflection): the bytes are
parsed here, and bad ones get INVALID_ARGUMENT with a warning at most once per ``LOG_EVERY_S``.
Methods without a deserializer (Infer, which parses its own bytes) are left as they are.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import grpc

from npudure.service import handlers
from npudure.service.handlers import LOG_EVERY_S, RateLimitedLog

log = logging.getLogger(__name__)


def _short(error: Exception) -> str:
    text = str(error) or type(error).__name__
    return text if len(text) <= 200 else text[:200] + "..."


class StrictDecoding(handlers.WrappingInterceptor):
    def __init__(self, log_every_s: float = LOG_EVERY_S) -> None:
        self._log = RateLimitedLog(log, log_every_s)

    def wrap_handler(self, method: str, handler: handlers.MethodHandler) -> handlers.MethodHandler:
        if handler.request_deserializer is None:
            return handler
        parse = self._parser(method, handler.request_deserializer)
        return handlers.wrap(handler, on_request=parse, request_deserializer=None)

    def _parser(self, method: str, deserialize: Callable[[bytes], object]) -> handlers.OnRequest:
        async def parse(request: bytes, context: handlers.Context) -> object:
            try:
                return deserialize(request)
            except Exception as exc:  # DecodeError, and anything a parser raises on hostile bytes
                self._log.warn("malformed %s request from %s: %s", method, context.peer(), _short(exc))
                await context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"the request is not a valid message for {method}: {_short(exc)}",
                )

        return parse


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
