"""What a watcher sees of an edge connection: the gateway's connection guard
(smg/api/connection_guard.py) sweeps and counts edge connections beside aiohttp's.

`Watcher` is the hook `EdgeServer(watcher=...)` takes: `admit(conn, transport)` as a connection
opens (False: the watcher refused it and closed the transport, e.g. over its cap) and
`forget(conn)` as it closes or is handed over. The watcher sets `admitted`, `deadlines`,
`edge_transport` and `fd` on the connection (duck typing: the edge imports nothing of it).

`WatchedConnection` is mixed into the edge's protocol: counters it keeps anyway (bytes
received, requests started, response bytes framed), no timer or clock read per chunk, and what
the sweeper calls: `sample()`, `stall_body()`, `force_close()`.
"""

from __future__ import annotations

import asyncio
import fcntl
import sys
import termios
from typing import Protocol

from smg import errors
from smg.core.conn_deadlines import ConnDeadlines, Sample, Verdict
from smg.edge.exchange import Timeouts
from smg.edge.h1_write import ResponseWriter


class Watcher(Protocol):
    def admit(self, conn: WatchedConnection, transport: asyncio.BaseTransport) -> bool: ...
    def forget(self, conn: WatchedConnection) -> None: ...


class WatchedConnection:
    """The watcher's view of one edge connection; see the module doc."""

    transport: asyncio.Transport
    response: ResponseWriter
    timeouts: Timeouts
    closing: bool
    _body_waiter: asyncio.Future[None] | None

    def _init_watched(self) -> None:
        self.admitted = False  # set by the watcher
        self.edge_transport: asyncio.Transport | None = None  # set by the watcher
        self.fd = -1  # set by the watcher: the socket, to ask the kernel what is unsent
        self.deadlines: ConnDeadlines | None = None  # set by the watcher
        self.cut: Verdict | None = None  # set by the watcher's sweeper
        self.rx = 0  # bytes received
        self.requests = 0  # requests whose handler started
        self.in_request = False
        self.rx_at_idle = 0  # `rx` as the last request's handler ended
        self.written = 0  # bytes framed by the responses before the current one

    def sample(self) -> Sample:
        """The counters now. What the client has taken is what was written minus what still
        waits in the transport and in the kernel's send queue."""
        buffered = buffered_bytes(self.edge_transport, self.fd, self.in_request)
        return Sample(
            rx=self.rx,
            requests=self.requests,
            in_request=self.in_request,
            rx_at_idle=self.rx_at_idle,
            reading_body=self._body_waiter is not None,
            sent=self.written + self.response.output - buffered,
            buffered=buffered,
        )

    def stall_body(self) -> None:
        """The body stopped coming: the handler waiting for it gets 408 (its answer closes the
        connection, the rest of the body never being read); with no handler waiting, close."""
        self.closing = True
        waiter = self._body_waiter
        if waiter is not None and not waiter.done():
            dl = self.deadlines  # the watcher's limit said so; else the edge's own
            secs = dl.limits.body_timeout_s if dl is not None else self.timeouts.body
            waiter.set_exception(errors.body_timeout(secs))
        else:
            self.force_close()

    def force_close(self) -> None:
        """Close now (a handler in flight is cancelled as the connection is lost)."""
        self.closing = True
        self.transport.close()


def buffered_bytes(tr: asyncio.Transport | None, fd: int, busy: bool) -> int:
    """Response bytes the client has not taken: in the transport's buffer and, while a request
    runs or bytes wait, in the kernel's send queue (which holds megabytes: a client that stops
    reading is seen only once its window is closed)."""
    if tr is None:
        return 0
    buffered = tr.get_write_buffer_size()
    if fd >= 0 and not tr.is_closing() and (busy or buffered):
        buffered += unsent_bytes(fd)
    return buffered


def unsent_bytes(fd: int) -> int:
    """Bytes in the socket's send queue the peer has not acknowledged (Linux SIOCOUTQ); 0 where
    the kernel does not say."""
    try:
        return int.from_bytes(fcntl.ioctl(fd, termios.TIOCOUTQ, b"\0\0\0\0"), sys.byteorder)
    except OSError:
        return 0
