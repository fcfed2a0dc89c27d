"""What a handler sees of one HTTP/1.1 exchange: `EdgeRequest` (head, bounded body reader),
`EdgeResponse` (whole or streamed answer, writes wait for the client) and `Reply`.

They reach the connection (smg/edge/server.py) through the `Connection` protocol below, so this
module imports no shell.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Protocol

from smg.edge.h1 import Body, End, H1Connection, ProtocolError, RequestHead
from smg.edge.h1_write import CHUNK_FRAME, Headers, ResponseWriter
from smg.errors import ApiError


class Connection(Protocol):
    core: H1Connection
    response: ResponseWriter
    transport: asyncio.Transport
    loop: asyncio.AbstractEventLoop
    closing: bool
    body_done: bool

    @property
    def write_paused(self) -> bool: ...

    def resume_if_room(self) -> None: ...
    async def wait_body(self) -> None: ...
    async def drain(self) -> None: ...
    def before_head(self) -> None: ...


JSON = ((b"Content-Type", b"application/json"),)
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


@dataclass(frozen=True, slots=True)
class Timeouts:
    header: float = 10.0
    keep_alive: float = 75.0
    body: float = 60.0
    write: float = 60.0


@dataclass(frozen=True, slots=True)
class Reply:
    """A whole response a handler may return instead of writing through `EdgeResponse`."""

    status: int
    body: bytes | bytearray = b""  # a bytearray as read (written once, never changed)
    headers: Headers = JSON  # bytes: header lines already rendered and checked


class EdgeRequest:
    """The request being answered: its head and a bounded body reader."""

    __slots__ = ("_conn", "_continued", "head", "peer")

    def __init__(self, conn: Connection, head: RequestHead, peer: object) -> None:
        self._conn = conn
        self.head = head
        self.peer = peer
        self._continued = not head.expect_continue

    async def read_chunk(self) -> bytes:
        """The next body bytes; b"" at the end. A body over the cap raises ApiError(413)."""
        conn = self._conn
        while True:
            ev = conn.core.peek()
            if type(ev) is Body:
                conn.core.next_event()
                conn.resume_if_room()
                return ev.data
            if type(ev) is End:
                conn.core.next_event()
                conn.body_done = True
                return b""
            if type(ev) is ProtocolError:
                conn.core.next_event()
                conn.closing = True
                raise ApiError(ev.status, ev.code, ev.message)
            if conn.core.done:  # EOF or an upgrade before the body ended
                raise ApiError(400, "incomplete_request", "The request body ended early.")
            if not self._continued and not conn.response.started:
                self._continued = True
                conn.transport.write(_CONTINUE)
            await conn.wait_body()

    def body_complete(self) -> bool:
        """Whether the body has ended or its end is the next event (no more bytes will come)."""
        conn = self._conn
        return conn.body_done or type(conn.core.peek()) is End

    async def read(self) -> bytes:
        """The whole body (bounded by the core's `max_body`)."""
        first = await self.read_chunk()
        if not first:
            return b""
        parts = [first]
        while chunk := await self.read_chunk():
            parts.append(chunk)
        return parts[0] if len(parts) == 1 else b"".join(parts)


class EdgeResponse:
    """Writes the answer: `send` for a whole response, or `start`, `write`..., `end`.

    `start` holds the head until the first body bytes of the same loop turn and sends both in
    one write (a streamed answer starts with its first batch in hand: one syscall less per
    stream); at the end of that turn the head goes out alone if nothing came."""

    __slots__ = ("_conn", "_head", "sent")

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._head = b""
        self.sent = 0  # body bytes given to `write` and `write_nowait` (before framing)

    @property
    def started(self) -> bool:
        return self._conn.response.started

    async def send(self, status: int, body: bytes, headers: Headers = JSON) -> None:
        conn = self._conn
        conn.before_head()
        conn.transport.write(conn.response.whole(status, headers, body))
        await conn.drain()

    async def start(
        self,
        status: int,
        headers: tuple[tuple[bytes, bytes], ...] = JSON,
        content_length: int | None = None,
    ) -> None:
        conn = self._conn
        conn.before_head()
        self._head = conn.response.head(status, headers, content_length)
        conn.loop.call_soon(self._flush_head)

    def _flush_head(self) -> None:
        if head := self._head:
            self._head = b""
            transport = self._conn.transport
            if not transport.is_closing():
                transport.write(head)

    def _send(self, out: bytes) -> None:
        """`out` to the client, after the head if it is still held."""
        if head := self._head:
            self._head = b""
            out = head + out
        self._conn.transport.write(out)

    async def write(self, data: bytes) -> None:
        conn = self._conn
        self.sent += len(data)
        if out := conn.response.body(data):
            self._send(out)
            await conn.drain()

    def write_nowait(self, data: bytes) -> bool:
        """`write` without waiting for the client: whether it takes more now (False: `drain`
        before the next write). A client gone raises ConnectionResetError."""
        conn = self._conn
        size = len(data)
        self.sent += size
        transport = conn.transport
        if transport.is_closing():
            raise ConnectionResetError("the client closed the connection")
        response = conn.response
        if response.chunking and size and not self._head:
            # the usual read: framed here (as `ResponseWriter.body` frames it), one call less
            out = CHUNK_FRAME % (size, data)
            response.output += len(out)
            transport.write(out)
        elif out := response.body(data):
            if self._head:  # held: it goes first
                self._send(out)
            else:
                transport.write(out)
        return not conn.write_paused

    async def drain(self) -> None:
        """Wait until the client takes more (at most the write timeout, then the cut)."""
        await self._conn.drain()

    async def end(self, last: bytes = b"") -> None:
        """End the body; `last`, the body's last bytes, goes out with the end in one write."""
        conn = self._conn
        response = conn.response
        if last:
            self.sent += len(last)
            out = response.body(last) + response.end()
        else:
            out = response.end()
        if out or self._head:
            self._send(out)
