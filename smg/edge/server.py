"""The lean HTTP/1.1 server: a listener whose connections are smg/edge/protocol.py's.

    server = EdgeServer(handler, limits=Limits(...), timeouts=Timeouts(...))
    await server.start(host, port, ssl=context_or_None)  # TLS: asyncio does the handshake
    ...
    await server.close()  # stops listening, cuts the connections (their handlers cancelled)

A handler is `async def handler(req: EdgeRequest, resp: EdgeResponse) -> Reply | None`: return
a `Reply` for a whole answer, or write through `resp` (start/write/end, or send) and return None.

With `native` (which requests are served here; smg/edge/handoff.py's `native_routes`) and
`handoff` (makes the protocol that takes a connection whose request is not native), one port
serves both: see smg/edge/protocol.py's module doc. A handed-over connection leaves
`connections`; `close` no longer waits for it.

With `watcher` (smg/edge/watched.py; the gateway's connection guard) each connection is admitted
by it and counted against its cap instead of `max_connections`.
"""

from __future__ import annotations

import asyncio
import logging
import ssl

from smg import errors
from smg.edge.exchange import EdgeRequest, EdgeResponse, Reply, Timeouts
from smg.edge.h1 import Limits
from smg.edge.h1_write import error_bytes
from smg.edge.handing import Handoff
from smg.edge.handoff import Native
from smg.edge.protocol import H1Protocol, Handler
from smg.edge.watched import Watcher

log = logging.getLogger(__name__)

__all__ = ["EdgeRequest", "EdgeResponse", "EdgeServer", "Handler", "Limits", "Reply", "Timeouts"]


class EdgeServer:
    """Owns the listener and its connections; `close` stops both."""

    def __init__(
        self,
        handler: Handler,
        *,
        limits: Limits = Limits(),
        timeouts: Timeouts = Timeouts(),
        max_connections: int = 10_000,
        native: Native | None = None,
        handoff: Handoff | None = None,
        watcher: Watcher | None = None,
    ) -> None:
        if (native is None) != (handoff is None):
            raise ValueError("native and handoff go together")
        self.handler = handler
        self.native = native
        self.handoff = handoff
        self.watcher = watcher
        self.limits = limits
        self.timeouts = timeouts
        self.max_connections = max_connections
        self.connections = _Connections()
        self._server: asyncio.Server | None = None

    def _protocol(self) -> asyncio.Protocol:
        if self.watcher is None and len(self.connections) >= self.max_connections:
            return _Refuse(self.max_connections)
        return H1Protocol(
            self.handler,
            self.limits,
            self.timeouts,
            self.connections,
            native=self.native,
            handoff=self.handoff,
            watcher=self.watcher,
        )

    async def start(
        self,
        host: str,
        port: int,
        *,
        ssl: ssl.SSLContext | None = None,
        backlog: int = 1024,
        reuse_port: bool = False,
    ) -> asyncio.Server:
        """Listen (`reuse_port`: the port is shared with the other processes of a group)."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self._protocol,
            host,
            port,
            ssl=ssl,
            backlog=backlog,
            reuse_address=True,
            reuse_port=reuse_port or None,
            # the handshake counts against the head's deadline (asyncio's default is 60 s)
            ssl_handshake_timeout=self.timeouts.header if ssl is not None else None,
        )
        return self._server

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self, grace: float = 5.0) -> None:
        """Stop listening; idle connections close now, busy ones after their answer (which says
        `Connection: close`); whatever is still open after `grace` s is cut (its handler
        cancelled)."""
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.shutdown()
        try:
            await asyncio.wait_for(self.connections.emptied(), grace)
        except TimeoutError:
            log.warning(
                "edge server: %d connections cut after %.1f s", len(self.connections), grace
            )
        for conn in list(self.connections):
            conn.abandon()
        if self._server is not None:
            try:
                await asyncio.wait_for(self._server.wait_closed(), 1.0)
            except TimeoutError:
                log.warning("edge server: the listener did not close in 1 s")


class _Connections(set[H1Protocol]):
    """The open connections; `emptied()` waits until none is left."""

    def __init__(self) -> None:
        super().__init__()
        self._empty: asyncio.Event | None = None

    def discard(self, conn: object, /) -> None:
        super().discard(conn)
        if not self and self._empty is not None:
            self._empty.set()

    async def emptied(self) -> None:
        if self:
            self._empty = asyncio.Event()
            await self._empty.wait()


class _Refuse(asyncio.Protocol):
    """A connection over `max_connections`: 503 in the OpenAI shape, then the close."""

    def __init__(self, limit: int) -> None:
        self.limit = limit

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.WriteTransport)
        transport.write(error_bytes(errors.too_many_connections(self.limit)))
        transport.close()
