"""The lean HTTP/1.1 server: a listener whose connections are smg/edge/protocol.py's.

    server = EdgeServer(handler, limits=Limits(...), timeouts=Timeouts(...))
    await server.start(host, port, ssl=context_or_None)  # TLS: asyncio does the handshake
    ...
    await server.close()  # stops listening, cuts the connections (their handlers cancelled)

A handler is `async def handler(req: EdgeRequest, resp: EdgeResponse) -> Reply | None`: return
a `Reply` for a whole answer, or write through `resp` (start/write/end, or send) and return None.
"""

from __future__ import annotations

import asyncio
import logging
import ssl

from smg.edge.exchange import EdgeRequest, EdgeResponse, Reply, Timeouts
from smg.edge.h1 import Limits
from smg.edge.protocol import H1Protocol, Handler

log = logging.getLogger(__name__)

__all__ = ["EdgeRequest", "EdgeResponse", "EdgeServer", "Handler", "Limits", "Reply", "Timeouts"]


class EdgeServer:
    """Owns the listener and its connections; `close` stops both."""

    def __init__(
        self, handler: Handler, *, limits: Limits = Limits(), timeouts: Timeouts = Timeouts()
    ) -> None:
        self.handler = handler
        self.limits = limits
        self.timeouts = timeouts
        self.connections: set[H1Protocol] = set()
        self._server: asyncio.Server | None = None

    async def start(
        self, host: str, port: int, *, ssl: ssl.SSLContext | None = None, backlog: int = 1024
    ) -> asyncio.Server:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: H1Protocol(self.handler, self.limits, self.timeouts, self.connections),
            host,
            port,
            ssl=ssl,
            backlog=backlog,
        )
        return self._server

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self, timeout: float = 5.0) -> None:
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.transport.abort()  # connection_lost cancels its handler
        if self._server is not None:
            try:
                await asyncio.wait_for(self._server.wait_closed(), timeout)
            except TimeoutError:
                log.warning("edge server: connections still open after %.1f s", timeout)
