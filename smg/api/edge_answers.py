"""The flow's answers written on the lean edge (smg/edge).

The flow speaks aiohttp's response objects: it returns a `web.Response` for a whole answer and
streams through a `web.StreamResponse` it prepares against the client's request. On the lean
edge there is no aiohttp request, so the client is an `EdgeClient`: the few attributes aiohttp's
`StreamResponse.prepare` reads of a request (`method`, `version`, `keep_alive`, `path`, the
`_payload_writer` it writes through and the `_prepare_hook` it awaits), with an `EdgeWriter` as
the payload writer that hands the head and the body to `EdgeResponse`, which frames them
(chunked, keep-alive) itself. A whole answer is never prepared: `whole_reply` gives its status,
headers and body in one piece.

Written against aiohttp 3.14's `StreamResponse._start` / `_prepare_headers` / `_write_headers`
(what they read of a request and call on a writer); tests/api/test_edge_answers.py checks it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable

from aiohttp import HttpVersion, HttpVersion10, HttpVersion11, web
from multidict import CIMultiDict

from smg.core.headers import decoded
from smg.edge.exchange import EdgeResponse, Reply
from smg.edge.h1 import RequestHead

# the framing headers are the edge's to write (aiohttp's prepare adds some of them)
_FRAMING = frozenset({"content-length", "transfer-encoding", "connection"})

PrepareHook = Callable[[str | None, web.StreamResponse], None]


def client_headers(head: RequestHead) -> CIMultiDict[str]:
    """The request's headers as aiohttp decodes them (UTF-8, undecodable bytes kept)."""
    return decoded(head.headers)


def header_block(headers: Iterable[tuple[str, str]]) -> bytes:
    """`wire_headers` rendered at once as the edge's header lines (`ResponseWriter` takes the
    bytes as they are): one string, encoded once, checked for line breaks once."""
    lines = [f"{k}: {v}\r\n" for k, v in headers if k.lower() not in _FRAMING]
    text = "".join(lines)
    if text.count("\n") != len(lines) or text.count("\r") != len(lines):
        raise ValueError("a response header holds a line break")
    return text.encode("utf-8", "surrogateescape")


def wire_headers(headers: Iterable[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    """An aiohttp response's headers for the edge's writer: framing ones dropped."""
    return [
        (k.encode("latin-1"), v.encode("utf-8", "surrogateescape"))
        for k, v in headers
        if k.lower() not in _FRAMING
    ]


class EdgeWriter:
    """aiohttp's payload-writer role for a `StreamResponse` on the lean edge. A relayed
    stream's pipe calls `write_nowait` and `wait_writable` per read: they are the edge
    response's own (bound once, no forwarding call), which counts the body bytes too."""

    __slots__ = ("buffer_size", "length", "out", "wait_writable", "write_nowait")

    def __init__(self, out: EdgeResponse) -> None:
        self.out = out
        self.length: int | None = None
        self.buffer_size = 0
        # a body write that does not wait: whether the client takes more now (False: await
        # `wait_writable` first); a client gone raises ConnectionResetError
        self.write_nowait: Callable[[bytes], bool] = out.write_nowait
        self.wait_writable: Callable[[], Awaitable[None]] = out.drain

    @property
    def output_size(self) -> int:
        """Body bytes written (as aiohttp's writer counts them: no framing)."""
        return self.out.sent

    def enable_chunking(self) -> None:
        """The edge frames a body of unknown length itself."""

    def enable_compression(self, *_: object, **__: object) -> None:
        raise RuntimeError("the gateway does not compress its answers")

    async def write_headers(self, status_line: str, headers: CIMultiDict[str]) -> None:
        status = int(status_line.split(" ", 2)[1])
        await self.out.start(status, tuple(wire_headers(headers.items())), self.length)

    def send_headers(self) -> None:
        """The head went out in `write_headers`."""

    async def write(self, data: bytes | bytearray | memoryview, **_: object) -> None:
        if data:
            await self.out.write(bytes(data))

    async def write_eof(self, chunk: bytes | bytearray | memoryview = b"") -> None:
        await self.out.end(bytes(chunk))  # the last bytes and the end: one write

    async def drain(self) -> None:
        """Every write already waited for the client."""


class EdgeClient:
    """The client's request as the flow's `web.StreamResponse.prepare` sees it on the edge."""

    __slots__ = ("_hook", "_out", "_writer", "keep_alive", "method", "origin", "path", "version")

    def __init__(
        self,
        head: RequestHead,
        path: str,
        out: EdgeResponse,
        origin: str | None,
        hook: PrepareHook | None,
    ) -> None:
        method = head.method
        self.method = "POST" if method == b"POST" else method.decode("ascii")
        self.path = path
        self.version: HttpVersion = HttpVersion11 if head.version == "1.1" else HttpVersion10
        self.keep_alive = head.keep_alive
        self._out = out
        self._writer: EdgeWriter | None = None  # made when a stream is prepared, not per request
        self.origin = origin  # the client's Origin header, for CORS
        self._hook = hook

    async def _prepare_hook(self, response: web.StreamResponse) -> None:
        if self._hook is not None:
            self._hook(self.origin, response)

    @property
    def _payload_writer(self) -> EdgeWriter:
        writer = self._writer
        if writer is None:
            writer = self._writer = EdgeWriter(self._out)
        return writer

    @property
    def writer(self) -> EdgeWriter:
        """The payload writer (as aiohttp's `BaseRequest.writer`)."""
        return self._payload_writer

    @property
    def output_size(self) -> int:
        return 0 if self._writer is None else self._writer.output_size


def whole_body_reply(
    status: int, body: bytes | bytearray, content_type: str | None, headers: dict[str, str]
) -> Reply:
    """A whole answer's parts as the edge's `Reply` (as `smg.flow.answer.Whole` holds them):
    `content_type` None when `headers` carry their own; a body without one is typed
    application/octet-stream, as aiohttp types it."""
    if content_type is None:
        for name in headers:
            if name.lower() == "content-type":
                return Reply(status, body, header_block(headers.items()))
        if not body:
            return Reply(status, body, header_block(headers.items()))
        content_type = "application/octet-stream"
    return Reply(status, body, header_block((("Content-Type", content_type), *headers.items())))


def whole_reply(resp: web.StreamResponse) -> Reply:
    """A whole (unprepared) aiohttp answer as the edge's `Reply` (the edge writes it)."""
    if not isinstance(resp, web.Response):
        raise TypeError("an unprepared stream is not a whole answer")
    body = resp.body
    if body is None:
        data = b""
    elif isinstance(body, bytes | bytearray | memoryview):
        data = bytes(body)
    else:
        raise TypeError(f"a streamed payload ({type(body).__name__}) in a whole answer")
    headers = resp.headers
    if "Content-Type" not in headers and data:
        headers["Content-Type"] = "application/octet-stream"
    return Reply(resp.status, data, header_block(headers.items()))
