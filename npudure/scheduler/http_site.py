"""The HTTP API's listening socket, with a cap on the connections it holds.

aiohttp accepts every connection until the process runs out of file descriptors (a flood reached
19,966 of 20,000, and asyncio then logged each failed accept with a traceback). Here a connection
beyond ``http_api.max_connections`` is answered 503 and closed at once: one rate-limited log line and
a counter (``npudure_scheduler_http_connections_refused_total``), and the fds stay well below the limit.
TLS handshakes in progress are not yet connections to aiohttp: they are bounded by a 10 s handshake
timeout instead.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable

from aiohttp import web

from npudure.service.handlers import RateLimitedLog

log = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT_S = 10.0
BUSY = b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nRetry-After: 1\r\nContent-Length: 0\r\n\r\n"


class _Refused(asyncio.Protocol):
    """A connection over the cap: told 503 and closed, nothing read."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if isinstance(transport, asyncio.WriteTransport):
            transport.write(BUSY)
        transport.close()


class CappedFactory:
    """aiohttp's protocol factory, handing out a refusal instead once ``cap`` connections are open.

    A burst of connections is accepted in one pass of the event loop, and aiohttp counts a connection
    only when the loop runs its connection_made, after the whole pass: so those handed out and not yet
    made are counted here (``pending``), until the loop's next pass, where connection_made runs too."""

    def __init__(self, server: web.Server, cap: int, refused: Callable[[int], None]) -> None:
        self.server = server
        self.cap = cap
        self.refused = refused
        self.pending = 0

    def __call__(self) -> asyncio.BaseProtocol:
        open_now = len(self.server.connections) + self.pending
        if open_now >= self.cap:
            self.refused(open_now)
            return _Refused()
        self.pending += 1
        # Queued before the transport queues connection_made: both run in the loop's next pass.
        asyncio.get_running_loop().call_soon(self._made)
        return self.server()

    def _made(self) -> None:
        self.pending -= 1


class CappedSite(web.BaseSite):
    """A TCP site (as aiohttp's TCPSite) whose connections are capped."""

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str,
        port: int,
        cap: int,
        on_refused: Callable[[], None],
        ssl_context: ssl.SSLContext | None = None,
        reuse_port: bool = False,
        backlog: int = 1024,
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context, backlog=backlog)
        self._host, self._port, self._cap = host, port, cap
        self._reuse_port = reuse_port
        self._on_refused = on_refused
        self._log = RateLimitedLog(log)

    @property
    def name(self) -> str:
        return f"{'https' if self._ssl_context else 'http'}://{self._host}:{self._port}"

    def _refused(self, open_now: int) -> None:
        self._on_refused()
        self._log.warn(
            "HTTP API: %d connections are open (http_api.max_connections = %d): new ones are answered "
            "503 and closed",
            open_now,
            self._cap,
        )

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        if server is None:
            raise RuntimeError("the runner is not set up")
        self._server = await asyncio.get_running_loop().create_server(
            CappedFactory(server, self._cap, self._refused),
            self._host,
            self._port,
            ssl=self._ssl_context,
            backlog=self._backlog,
            reuse_address=True,
            reuse_port=self._reuse_port or None,
            ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S if self._ssl_context else None,
        )
