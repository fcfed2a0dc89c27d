"""Sans-IO HTTP/1.1 client connection: a request serialised to bytes, a response parsed from
bytes into events (no I/O, no asyncio). The shell is smg/pipeline/backends/h1_pool.py.

`request_bytes` frames one request (request line, Host, the caller's headers, Content-Length,
the body). `ResponseParser.feed(data)` parses with httptools (llhttp) and queues events: one
`ResponseHead`, `bytes` body chunks (Content-Length, chunked and until-close bodies decoded), then
`End` (with the keep-alive decision) or one `ParseError` (after which the connection is done).
Informational answers (1xx) are skipped. Bounds: the header block's bytes and count. The body's
size is the reader's to cap (whole answers) or to relay chunk by chunk (streams): the shell
pauses reading while too much of it waits unread.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

import httptools


@dataclass(frozen=True, slots=True)
class Limits:
    max_head_bytes: int = 64 * 1024  # status line + header block
    max_headers: int = 128


class ResponseHead:
    """A status line and header block; `headers` keeps the wire order and case."""

    __slots__ = ("chunked", "content_length", "headers", "status", "version")

    def __init__(
        self,
        status: int,
        version: str,
        headers: list[tuple[bytes, bytes]],
        content_length: int | None,
        chunked: bool,
    ) -> None:
        self.status = status
        self.version = version
        self.headers = headers
        self.content_length = content_length
        self.chunked = chunked


@dataclass(slots=True)
class End:
    keep_alive: bool  # the connection may carry the next request


@dataclass(slots=True)
class ParseError:
    message: str


Event = ResponseHead | bytes | End | ParseError
_FRAMING_INITIALS = frozenset(b"ct")


class _Stop(Exception):
    """Raised from a parser callback to stop at a bound (httptools wraps it)."""


def host_header(host: str, port: int, scheme: str) -> str:
    """The Host header of a worker: its port named unless it is the scheme's default."""
    name = f"[{host}]" if ":" in host else host
    default = 443 if scheme == "https" else 80
    return name if port == default else f"{name}:{port}"


def request_bytes(
    method: str, target: str, host: str, headers: Mapping[str, str], body: bytes
) -> bytes:
    """One request's bytes. The caller's headers go as given (no Host, Content-Length or
    Transfer-Encoding among them: they are framed here); a CR or LF in the request line or a
    header raises ValueError (no header injection)."""
    lines = [f"{method} {target} HTTP/1.1\r\nHost: {host}\r\n"]
    for k, v in headers.items():  # not extend(generator): a generator resume costs more
        lines.append(f"{k}: {v}\r\n")
    lines.append(f"Content-Length: {len(body)}\r\n\r\n")
    head = "".join(lines)
    breaks = len(headers) + 4  # one per line, and the blank line
    if head.count("\n") != breaks or head.count("\r") != breaks:
        raise ValueError("a CR or LF in the request line or a header")
    return head.encode("utf-8", "surrogateescape") + body


class ResponseParser:
    """One client connection's response side; see the module doc. One request is outstanding
    at a time: bytes that begin another response after `End` make the connection unusable."""

    def __init__(self, limits: Limits = Limits()) -> None:
        self.limits = limits
        self.events: deque[Event] = deque()
        self.started = False  # a byte of a response arrived
        self.done = False  # a ParseError, a response that ends with the connection, or EOF
        self.ended = False  # the last response's End was queued
        self.reusable = False  # ended, keep-alive, and nothing after it
        # llhttp queues each body piece itself (a C call, no Python frame a piece); an
        # informational answer's body is taken back out (`_drop_info_body`)
        self.on_body = self.events.append
        self._info_at = 0  # how many events were queued when an informational head ended
        self._parser = httptools.HttpResponseParser(self)
        self._error: str | None = None
        self._reset_message()

    def _reset_message(self) -> None:
        self._headers: list[tuple[bytes, bytes]] = []
        self._head_bytes = 0
        self._raw_head_bytes = 0
        self._length: int | None = None
        self._chunked = False
        self._in_head = False
        self._in_body = False
        self._info = False  # a 1xx answer: skipped

    def expect(self) -> None:
        """A request was sent on this (reused) connection: its answer comes next."""
        self.started = False
        self.ended = False
        self.reusable = False

    # -- input --------------------------------------------------------------------------------

    def feed(self, data: bytes) -> None:
        if self.done:
            return
        self.started = True
        if self.ended:  # bytes nobody asked for: this connection carries nothing more
            self.reusable = False
            self.done = True
            return
        in_head = self._in_head
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail("the worker switched protocols")
            return
        except httptools.HttpParserError as exc:
            if self.ended:  # bytes after the answer: it stands, the connection is done
                self.done = True
                self.reusable = False
            else:
                self._fail(self._error or f"malformed HTTP response: {exc}")
            return
        if self._in_head:  # a head still open: bound what llhttp holds for it
            self._raw_head_bytes += len(data) if in_head else 0
            if self._raw_head_bytes > self.limits.max_head_bytes:
                self._fail(self._too_large())
        elif self._info:
            self._drop_info_body()

    def feed_eof(self) -> None:
        """The worker closed the connection: an until-close body ends well, anything else that
        was under way is a `ParseError`."""
        if self.done:
            return
        if self._in_body and self._length is None and not self._chunked:
            self.events.append(End(False))
            self.ended = True
        elif self.started and not self.ended:
            self._fail("the worker closed the connection mid-response")
        self.done = True
        self.reusable = False

    def _fail(self, message: str) -> None:
        self.done = True
        self.reusable = False
        self._in_head = False
        self.events.append(ParseError(message))

    def _too_large(self) -> str:
        return f"the worker's response head exceeds {self.limits.max_head_bytes} bytes"

    # -- httptools callbacks ------------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self.ended:  # another answer nobody asked for
            raise _Stop
        self._in_head = True

    def on_header(self, name: bytes, value: bytes) -> None:
        n = self._head_bytes = self._head_bytes + len(name) + len(value) + 4
        if n > self.limits.max_head_bytes:
            self._stop(self._too_large())
        if self._in_body:  # chunked trailers: bounded like the head, then dropped
            return
        headers = self._headers
        headers.append((name, value))
        if len(headers) > self.limits.max_headers:
            self._stop(f"the worker's response has more than {self.limits.max_headers} headers")
        if name[0] | 0x20 in _FRAMING_INITIALS:
            lower = name.lower()
            if lower == b"content-length":
                self._length = int(value)  # llhttp has checked the digits and repeats
            elif lower == b"transfer-encoding":
                self._chunked = value.strip().lower().endswith(b"chunked")

    def _stop(self, message: str) -> None:
        self._error = message
        raise _Stop

    def on_headers_complete(self) -> None:
        p = self._parser
        status = p.get_status_code()
        self._in_head = False
        self._in_body = True
        if 100 <= status < 200:
            self._info = True
            self._info_at = len(self.events)
            return
        self.events.append(
            ResponseHead(status, p.get_http_version(), self._headers, self._length, self._chunked)
        )

    def _drop_info_body(self) -> None:
        """An informational answer has no body (RFC 9110 15.2): what llhttp read as one (a
        1xx with a length) is dropped, as it is queued (no 1xx event follows the head)."""
        events = self.events
        while len(events) > self._info_at:
            events.pop()

    def on_message_complete(self) -> None:
        if self._info:
            self._drop_info_body()
            self._reset_message()
            return
        keep = self._parser.should_keep_alive()
        self.events.append(End(keep))
        self.ended = True
        self.reusable = keep
        self._reset_message()
