"""Sans-IO HTTP/1.1 server connection, response side: one response at a time, serialised.

`ResponseWriter.head(...)` frames a status line and header block for the request being
answered: it adds Content-Length or `Transfer-Encoding: chunked` and decides `Connection:
close` (the request asked for it, HTTP/1.0 without keep-alive, the server is closing, or an
HTTP/1.0 body without a length, which only the close can end). `body` and `end` frame the rest;
a HEAD request's body is dropped. Header values with CR or LF are refused (no injection).
"""

from __future__ import annotations

from http import HTTPStatus

from smg.edge.h1 import RequestHead
from smg.errors import ApiError

_STATUS_LINES = {s.value: b"HTTP/1.1 %d %s\r\n" % (s.value, s.phrase.encode()) for s in HTTPStatus}
_FRAMING = frozenset({b"content-length", b"transfer-encoding", b"connection"})
_BLOCKS: dict[tuple[tuple[bytes, bytes], ...], bytes] = {}  # checked header tuples, rendered
_BLOCKS_MAX = 256
CHUNK_FRAME = b"%x\r\n%s\r\n"  # a chunk of a chunked body: `CHUNK_FRAME % (len(data), data)`


Headers = list[tuple[bytes, bytes]] | tuple[tuple[bytes, bytes], ...] | bytes


def _header_block(headers: Headers) -> bytes:
    """`headers` as wire lines, refusing framing headers (the writer's) and line breaks. A
    tuple is checked once and remembered (most responses reuse a constant one); bytes are lines
    the caller rendered and checked already (smg.api.edge_answers.header_block)."""
    if isinstance(headers, bytes):
        return headers
    cached = type(headers) is tuple and _BLOCKS.get(headers)
    if cached:
        return cached
    parts = []
    for name, value in headers:
        if name.lower() in _FRAMING:
            raise ValueError(f"{name!r} is the server's to set")
        parts.append(b"%s: %s\r\n" % (name, value))
    block = b"".join(parts)
    if block.count(b"\n") != len(parts) or block.count(b"\r") != len(parts):
        raise ValueError("a response header holds a line break")
    if type(headers) is tuple and len(_BLOCKS) < _BLOCKS_MAX:
        _BLOCKS[headers] = block
    return block


class ResponseWriter:
    """Frames one response; `keep_alive` says whether the connection may serve another."""

    __slots__ = (
        "_chunked",
        "_http10",
        "_no_body",
        "_remaining",
        "chunking",
        "finished",
        "keep_alive",
        "output",
        "started",
    )

    def __init__(self, request: RequestHead, *, closing: bool = False) -> None:
        self.keep_alive = request.keep_alive and not closing
        self._no_body = request.method == b"HEAD"
        self._chunked = False
        # a chunked body is open and sent (not HEAD): `body`'s fast path, and the edge's
        # (`EdgeResponse.write_nowait` frames such a chunk itself: `CHUNK_FRAME`)
        self.chunking = False
        self._remaining: int | None = None
        self.started = False
        self.finished = False
        self.output = 0  # bytes framed so far (what the connection guard counts as written)
        self._http10 = request.version == "1.0"

    def head(
        self,
        status: int,
        headers: Headers = (),
        content_length: int | None = None,
    ) -> bytes:
        if self.started:
            raise RuntimeError("the response has already started")
        self.started = True
        line = _STATUS_LINES.get(status) or b"HTTP/1.1 %d Unknown\r\n" % status
        block = _header_block(headers)
        if status < 200 or status == 204 or status == 304:
            self._remaining = 0
            framing = b""
        elif content_length is not None:
            framing = b"Content-Length: %d\r\n" % content_length
            self._remaining = content_length
        elif self._http10:
            self.keep_alive = False  # the close ends the body
            framing = b""
        else:
            framing = b"Transfer-Encoding: chunked\r\n"
            self._chunked = True
            self.chunking = not self._no_body
        if not self.keep_alive:
            framing += b"Connection: close\r\n\r\n"
        elif self._http10:
            framing += b"Connection: keep-alive\r\n\r\n"
        else:
            framing += b"\r\n"
        out = line + block + framing
        self.output += len(out)
        return out

    def body(self, data: bytes) -> bytes:
        if self.chunking:  # a streamed answer's usual write: one flag, not four checks
            if not data:
                return b""
            out = CHUNK_FRAME % (len(data), data)
            self.output += len(out)
            return out
        if not self.started or self.finished:
            raise RuntimeError("no response body is open")
        if self._remaining is not None:
            if len(data) > self._remaining:
                raise ValueError("more body than the Content-Length said")
            self._remaining -= len(data)
        if self._no_body or not data:  # (a chunked body that is sent took the fast path)
            return b""
        self.output += len(data)
        return data

    def end(self) -> bytes:
        if not self.started or self.finished:
            raise RuntimeError("no response body is open")
        self.finished = True
        self.chunking = False
        if self._remaining:
            self.keep_alive = False  # short of its Content-Length: only a close can say so
            return b""
        if self._chunked and not self._no_body:
            self.output += 5
            return b"0\r\n\r\n"
        return b""

    def whole(
        self,
        status: int,
        headers: Headers,
        body: bytes | bytearray,
    ) -> bytes:
        """Head, body and end in one buffer (one write for a whole response)."""
        data = self.head(status, headers, len(body))
        self.finished = True
        if self._no_body:
            return data
        self.output += len(body)
        return data + body


NO_REQUEST = RequestHead(b"GET", b"/", "1.1", [], False, False, None)  # before any request
_JSON = ((b"Content-Type", b"application/json"),)


def error_bytes(err: ApiError) -> bytes:
    """A whole error response that closes the connection (no request to frame it for)."""
    return ResponseWriter(NO_REQUEST, closing=True).whole(err.status, _JSON, err.to_json())
