"""The lean HTTP/1.1 client's response objects (smg/pipeline/backends/h1_pool.py makes them).

`H1Response` reads like the part of `aiohttp.ClientResponse` the request flow uses: `status`,
`headers` (case-insensitive), `content_type`, `content_length`, `content` (`readany`, `read`,
`set_exception`, `exception`, `at_eof`, as aiohttp's `StreamReader`), `release()` (the
connection goes back to its pool when the body was read to its end and the worker keeps it
alive) and `close()` (the connection is dropped: the worker sees the disconnect). `status` and
`content` may be replaced (a provider's answer is translated in their place).

The body is buffered in order; reading pauses once `high_water` bytes wait unread and resumes
when the reader has taken them, so a stream is relayed chunk by chunk with bounded memory.

`Body.pipe(sink)` turns the rest of the body into callbacks: what is buffered, then every chunk
as the connection decodes it, goes to `sink.data` in the connection's own `data_received` (no
buffer, no future, no task wake); the end to `sink.end`, a failure (the idle cut, the deadline,
a broken connection) to `sink.fail`. The body's last bytes, when its end came in the same read,
go to `sink.last` (so the sink can write them with its own end), and the end to `sink.end` too.
The sink holds the connection back with `pause_source` / `resume_source` (its client is slow).
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any, Protocol

import aiohttp
import orjson
from multidict import CIMultiDict

from smg.core.headers import decoded

HIGH_WATER = 256 * 1024  # unread body bytes before the connection stops reading


class Reading(Protocol):
    """What the body asks of its connection."""

    def pause(self) -> None: ...
    def resume(self) -> None: ...


class Sink(Protocol):
    """Where a piped body goes (called from the connection's callbacks; see the module doc)."""

    def data(self, chunk: bytes) -> None: ...
    def last(self, chunk: bytes) -> None: ...  # the body's last bytes: `end` follows at once
    def end(self) -> None: ...
    def fail(self, exc: BaseException) -> None: ...


class Body:
    """A response body as it arrives (aiohttp's `StreamReader` surface the flow reads)."""

    __slots__ = ("_chunks", "_conn", "_eof", "_exc", "_paused", "_size", "_waiter", "sink")

    def __init__(self, conn: Reading) -> None:
        self._conn = conn
        self._chunks: deque[bytes] = deque()
        self._size = 0
        self._eof = False
        self._exc: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._paused = False
        self.sink: Sink | None = None  # set by `pipe`; the connection may feed it directly

    # --- the connection's side ---------------------------------------------------------------
    def feed(self, data: bytes) -> None:
        sink = self.sink
        if sink is not None:
            sink.data(data)
            return
        self._chunks.append(data)
        self._size += len(data)
        if self._size > HIGH_WATER and not self._paused:
            self._paused = True
            self._conn.pause()
        self._wake()

    def feed_eof(self) -> None:
        self._eof = True
        if self.sink is not None:
            self.sink.end()
            return
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    # --- the reader's side -------------------------------------------------------------------
    def exception(self) -> BaseException | None:
        return self._exc

    def set_exception(self, exc: BaseException, exc_cause: BaseException | None = None) -> None:
        """Fail the next read (the idle sweeper's cut, a deadline, a broken connection); the
        first failure stands, and none after the body has ended."""
        if self._exc is None and not (self._eof and not self._chunks):
            self._exc = exc
            if self.sink is not None:
                self.sink.fail(exc)
                return
            self._wake()

    # --- a piped body ------------------------------------------------------------------------
    def pipe(self, sink: Sink) -> None:
        """Hand the rest of the body to `sink` (see the module doc); no reads after this."""
        if self._waiter is not None:
            raise RuntimeError("a reader is waiting on the body")
        self.sink = sink
        if self._paused:  # what waited unread goes out now: the sink decides when to hold
            self._paused = False
            self._conn.resume()
        if self._exc is not None:
            sink.fail(self._exc)
            return
        chunks = self._chunks
        if chunks:
            data = chunks.popleft() if len(chunks) == 1 else b"".join(chunks)
            chunks.clear()
            self._size = 0
            if self._eof:
                sink.last(data)
            else:
                sink.data(data)
        if self._eof:
            sink.end()

    def pause_source(self) -> None:
        """Stop reading the connection (the sink's client is slow)."""
        self._conn.pause()

    def resume_source(self) -> None:
        self._conn.resume()

    @property
    def ended(self) -> bool:
        """The connection delivered the whole body (some of it may be unread)."""
        return self._eof

    def at_eof(self) -> bool:
        return self._eof and not self._chunks

    async def readany(self) -> bytes:
        """What has arrived (at least one byte), or b"" at the end."""
        while True:
            if self._exc is not None:
                raise self._exc
            chunks = self._chunks
            if chunks:
                data = chunks.popleft() if len(chunks) == 1 else b"".join(chunks)
                chunks.clear()
                self._size = 0
                if self._paused:
                    self._paused = False
                    self._conn.resume()
                return data
            if self._eof:
                return b""
            waiter = self._waiter = asyncio.get_running_loop().create_future()
            await waiter

    async def read(self, n: int = -1) -> bytes:
        """Up to `n` bytes (at least one, b"" at the end); all of it when `n` < 0."""
        if n < 0:
            parts = []
            while chunk := await self.readany():
                parts.append(chunk)
            return b"".join(parts)
        data = await self.readany()
        if len(data) > n:
            self._chunks.appendleft(data[n:])
            self._size += len(data) - n
            data = data[:n]
        return data


class Connection(Reading, Protocol):
    def response_done(self, keep: bool) -> None: ...


class H1Response:
    """One worker's answer; see the module doc."""

    __slots__ = ("_conn", "_settled", "content", "content_length", "headers", "status")

    def __init__(
        self,
        conn: Connection,
        status: int,
        headers: CIMultiDict[str],
        content_length: int | None,
    ) -> None:
        self._conn = conn
        self._settled = False
        self.status = status
        self.headers = headers
        self.content_length = content_length
        self.content: Any = Body(conn)

    @property
    def content_type(self) -> str:
        raw = self.headers.get("Content-Type")
        if raw is None:
            return "application/octet-stream"  # as aiohttp says of an untyped body
        return raw.partition(";")[0].strip().lower()

    def release(self) -> None:
        """Done with the answer: its connection is kept when the body was read to its end."""
        if not self._settled:
            self._settled = True
            self._conn.response_done(True)

    def close(self) -> None:
        """Drop the connection (the rest of the body unread, or the reader gone)."""
        if not self._settled:
            self._settled = True
            self._conn.response_done(False)

    async def read(self) -> bytes:
        try:
            data: bytes = await self.content.read()
        except BaseException:
            self.close()
            raise
        self.release()
        return data

    async def json(self) -> Any:
        return orjson.loads(await self.read())

    async def __aenter__(self) -> H1Response:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.release()


def headers_of(raw: list[tuple[bytes, bytes]]) -> CIMultiDict[str]:
    """Response headers as aiohttp decodes them (UTF-8, undecodable bytes kept)."""
    return decoded(raw)


def payload_error(message: str) -> aiohttp.ClientPayloadError:
    return aiohttp.ClientPayloadError(message)
