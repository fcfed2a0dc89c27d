"""Sans-IO HTTP/1.1 server connection, request side: bytes in, events out (no I/O, no asyncio).

`H1Connection.feed(data)` parses with httptools (llhttp) and queues events: `Head`, `Body`,
`End`, or one `ProtocolError` (after which the connection is done). Bounds: header block bytes
and count (431), body bytes (413; Content-Length judged before any body byte, chunked counted
as it comes), HTTP version (505), transfer codings (501), malformed (400). Pipelined requests
queue in order; `want_read` turns False once `max_pipeline` heads or `body_high_water` body bytes
wait unconsumed, and the shell then pauses reading (one read is parsed whole, so a read holding
more requests than that queues them all: the bound is N or one read's worth).
The response side is smg/edge/h1_write.py.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Final

import httptools


@dataclass(frozen=True, slots=True)
class Limits:
    max_head_bytes: int = 32 * 1024  # request line + header block
    max_headers: int = 100
    max_body: int = 24 * 1024 * 1024  # the body budget's largest body (DEVELOPERS.md)
    max_pipeline: int = 8  # requests parsed ahead of the one being answered
    body_high_water: int = 256 * 1024  # unconsumed body bytes before reading pauses


class RequestHead:
    """A request line and header block. `headers` keeps the wire order and case."""

    __slots__ = (
        "_index",
        "chunked",
        "content_length",
        "expect_continue",
        "headers",
        "keep_alive",
        "method",
        "path",
        "query",
        "version",
    )

    def __init__(
        self,
        method: bytes,
        target: bytes,
        version: str,
        headers: list[tuple[bytes, bytes]],
        keep_alive: bool,
        chunked: bool,
        content_length: int | None,
    ) -> None:
        path, _, query = target.partition(b"?")
        self.method = method
        self.path = path
        self.query = query
        self.version = version
        self.headers = headers
        self.keep_alive = keep_alive
        self.chunked = chunked
        self.content_length = content_length
        self.expect_continue = False
        self._index: dict[bytes, bytes] | None = None

    def header(self, name: bytes) -> bytes | None:
        """The value of header `name` (any case; repeats joined with `, `), or None."""
        index = self._index
        if index is None:
            index = {}
            for k, v in self.headers:
                k = k.lower()
                index[k] = index[k] + b", " + v if k in index else v
            self._index = index
        return index.get(name.lower())


# events: slotted, not frozen (a frozen dataclass's __init__ costs object.__setattr__ calls)
@dataclass(slots=True)
class Head:
    head: RequestHead


@dataclass(slots=True)
class Body:
    data: bytes


@dataclass(slots=True)
class End:
    pass


@dataclass(slots=True)
class ProtocolError:
    status: int
    code: str
    message: str


Event = Head | Body | End | ProtocolError
_FRAMING_INITIALS = frozenset(b"cte")
END: Final = End()


class _Stop(Exception):
    """Raised from a parser callback to stop at a bound (httptools wraps it)."""


class H1Connection:
    """One server connection's request side; see the module doc."""

    def __init__(self, limits: Limits = Limits()) -> None:
        self.limits = limits
        self.events: deque[Event] = deque()
        self.queued_heads = 0  # Head events not yet taken
        self.queued_bytes = 0  # Body bytes not yet taken
        self.in_head = False  # a request line or header block is partly received
        self.done = False  # a ProtocolError, an upgrade or EOF: nothing more will be parsed
        self.between = True  # the parser is between messages: the next byte starts a request
        self._parser = httptools.HttpRequestParser(self)
        self._error: ProtocolError | None = None
        self._reset_message()

    def _reset_message(self) -> None:
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._head_bytes = 0  # counted from completed pieces (exact)
        self._raw_head_bytes = 0  # counted from whole reads while the head is open (bound)
        self._body_bytes = 0
        self._trailers = False
        self._length: int | None = None
        self._chunked = False
        self._expect = False

    # -- input ------------------------------------------------------------------------------

    def feed(self, data: bytes) -> None:
        if self.done:
            return
        heads_before = self.in_head
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self.done = True  # served as parsed, then closed: no upgrades here
            return
        except httptools.HttpParserError as exc:
            self._fail(self._error or _parse_error(exc))
            return
        if self.in_head:
            # a head still open after this read: bound the bytes llhttp holds for it
            self._raw_head_bytes += len(data) if heads_before else 0
            if self._raw_head_bytes > self.limits.max_head_bytes:
                self._fail(_head_too_large(self.limits))

    def feed_eof(self) -> None:
        if not self.done and self.in_head:
            self._fail(ProtocolError(400, "incomplete_request", "The request ended mid-head."))
        self.done = True

    def next_event(self) -> Event | None:
        """Take the oldest queued event, or None."""
        if not self.events:
            return None
        ev = self.events.popleft()
        if type(ev) is Body:
            self.queued_bytes -= len(ev.data)
        elif type(ev) is Head:
            self.queued_heads -= 1
        return ev

    def peek(self) -> Event | None:
        return self.events[0] if self.events else None

    @property
    def want_read(self) -> bool:
        lim = self.limits
        return (
            not self.done
            and self.queued_heads < lim.max_pipeline
            and self.queued_bytes < lim.body_high_water
        )

    def _fail(self, error: ProtocolError) -> None:
        self.done = True
        self.in_head = False
        self.events.append(error)

    # -- httptools callbacks ------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self.in_head = True
        self.between = False
        self._raw_head_bytes = 0

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._count(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        n = self._head_bytes = self._head_bytes + len(name) + len(value) + 4
        if n > self.limits.max_head_bytes:
            self._stop(_head_too_large(self.limits))
        if self._trailers:  # chunked trailers: bounded like the head, then dropped
            return
        headers = self._headers
        headers.append((name, value))
        if len(headers) > self.limits.max_headers:
            self._stop(ProtocolError(431, "too_many_headers", "Too many request headers."))
        if name[0] | 0x20 in _FRAMING_INITIALS:  # c, t, e: maybe a header we act on
            lower = name.lower()
            if lower == b"content-length":
                self._length = int(value)  # llhttp has checked the digits and repeats
            elif lower == b"transfer-encoding":
                if value.strip().lower() != b"chunked":
                    msg = "Only Transfer-Encoding: chunked is supported."
                    self._stop(ProtocolError(501, "transfer_encoding_not_implemented", msg))
                self._chunked = True
            elif lower == b"expect":
                self._expect = value.lower() == b"100-continue"

    def _count(self, n: int) -> None:
        self._head_bytes += n
        if self._head_bytes > self.limits.max_head_bytes:
            self._stop(_head_too_large(self.limits))

    def _stop(self, error: ProtocolError) -> None:
        self._error = error
        raise _Stop

    def on_headers_complete(self) -> None:
        p = self._parser
        version = p.get_http_version()
        if version != "1.1" and version != "1.0":
            self._stop(ProtocolError(505, "http_version_not_supported", "Only HTTP/1.x here."))
        length = self._length
        if length is not None and length > self.limits.max_body:
            self._stop(_body_too_large(self.limits))
        head = RequestHead(
            p.get_method(),
            self._url,
            version,
            self._headers,
            p.should_keep_alive(),
            self._chunked,
            length,
        )
        head.expect_continue = self._expect
        self.in_head = False
        self._trailers = True
        self.events.append(Head(head))
        self.queued_heads += 1

    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)
        if self._body_bytes > self.limits.max_body:
            self._stop(_body_too_large(self.limits))
        self.events.append(Body(body))
        self.queued_bytes += len(body)

    def on_message_complete(self) -> None:
        self.events.append(END)
        self.between = True
        self._reset_message()


def _head_too_large(limits: Limits) -> ProtocolError:
    msg = f"The request head exceeds {limits.max_head_bytes} bytes."
    return ProtocolError(431, "header_too_large", msg)


def _body_too_large(limits: Limits) -> ProtocolError:
    msg = f"The request body exceeds {limits.max_body} bytes."
    return ProtocolError(413, "body_too_large", msg)


def _parse_error(exc: Exception) -> ProtocolError:
    """llhttp's error as a status: its exact messages for a version (505) and a transfer coding
    it cannot read (501); anything else, smuggling shapes included (Content-Length beside
    Transfer-Encoding, bare LF line ends), is malformed (400)."""
    text = str(exc)
    if text == "Invalid HTTP version":
        return ProtocolError(505, "http_version_not_supported", "Only HTTP/1.x here.")
    if text == "Request has invalid `Transfer-Encoding`":
        msg = "Only Transfer-Encoding: chunked is supported."
        return ProtocolError(501, "transfer_encoding_not_implemented", msg)
    return ProtocolError(400, "malformed_request", f"Malformed HTTP request: {text}")
