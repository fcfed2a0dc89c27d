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

_REASONS = {s.value: s.phrase.encode() for s in HTTPStatus}
_FRAMING = frozenset({b"content-length", b"transfer-encoding", b"connection"})


class ResponseWriter:
    """Frames one response; `keep_alive` says whether the connection may serve another."""

    __slots__ = (
        "_chunked",
        "_http10",
        "_no_body",
        "_remaining",
        "finished",
        "keep_alive",
        "started",
    )

    def __init__(self, request: RequestHead, *, closing: bool = False) -> None:
        self.keep_alive = request.keep_alive and not closing
        self._no_body = request.method == b"HEAD"
        self._chunked = False
        self._remaining: int | None = None
        self.started = False
        self.finished = False
        self._http10 = request.version == "1.0"

    def head(
        self,
        status: int,
        headers: list[tuple[bytes, bytes]] | tuple[tuple[bytes, bytes], ...] = (),
        content_length: int | None = None,
    ) -> bytes:
        if self.started:
            raise RuntimeError("the response has already started")
        self.started = True
        lines = [b"HTTP/1.1 %d %s\r\n" % (status, _REASONS.get(status, b"Unknown"))]
        for name, value in headers:
            if name.lower() in _FRAMING:
                raise ValueError(f"{name!r} is the server's to set")
            if b"\r" in value or b"\n" in value or b"\r" in name or b"\n" in name:
                raise ValueError(f"header {name!r} holds a line break")
            lines.append(name + b": " + value + b"\r\n")
        if status < 200 or status in (204, 304):
            self._remaining = 0
        elif content_length is not None:
            lines.append(b"Content-Length: %d\r\n" % content_length)
            self._remaining = content_length
        elif self._http10:
            self.keep_alive = False  # the close ends the body
        else:
            lines.append(b"Transfer-Encoding: chunked\r\n")
            self._chunked = True
        if not self.keep_alive:
            lines.append(b"Connection: close\r\n")
        elif self._http10:
            lines.append(b"Connection: keep-alive\r\n")
        lines.append(b"\r\n")
        return b"".join(lines)

    def body(self, data: bytes) -> bytes:
        if not self.started or self.finished:
            raise RuntimeError("no response body is open")
        if self._remaining is not None:
            if len(data) > self._remaining:
                raise ValueError("more body than the Content-Length said")
            self._remaining -= len(data)
        if self._no_body or not data:
            return b""
        if self._chunked:
            return b"%x\r\n%s\r\n" % (len(data), data)
        return data

    def end(self) -> bytes:
        if not self.started or self.finished:
            raise RuntimeError("no response body is open")
        self.finished = True
        if self._remaining:
            self.keep_alive = False  # short of its Content-Length: only a close can say so
            return b""
        if self._chunked and not self._no_body:
            return b"0\r\n\r\n"
        return b""

    def whole(
        self,
        status: int,
        headers: list[tuple[bytes, bytes]] | tuple[tuple[bytes, bytes], ...],
        body: bytes,
    ) -> bytes:
        """Head, body and end in one buffer (one write for a whole response)."""
        data = self.head(status, headers, len(body))
        self.finished = True
        return data if self._no_body else data + body
