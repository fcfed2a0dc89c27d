"""The edge hands a connection over at a request it does not answer (smg/edge/protocol.py):
to aiohttp's low-level server here, over real sockets, with and without TLS."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest
import trustme
from aiohttp import web

from smg.edge.server import EdgeRequest, EdgeResponse, EdgeServer, Reply

pytestmark = pytest.mark.unit


async def _edge(req: EdgeRequest, _: EdgeResponse) -> Reply:
    body = await req.read()
    return Reply(200, b"edge:" + req.head.path + b":" + body, ((b"Content-Type", b"text/plain"),))


async def _aio(request: web.BaseRequest) -> web.Response:
    body = await request.read()
    return web.Response(text=f"aiohttp:{request.path}:{body.decode()}")


def _native(method: bytes, path: bytes) -> bool:
    return path.startswith(b"/fast")


class Watch:
    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.conns: set[Any] = set()
        self.refused = 0

    def admit(self, conn: Any, transport: asyncio.BaseTransport) -> bool:
        if len(self.conns) >= self.cap:
            self.refused += 1
            transport.close()
            return False
        conn.admitted = True
        self.conns.add(conn)
        return True

    def forget(self, conn: Any) -> None:
        self.conns.discard(conn)


class Both:
    def __init__(self, edge: EdgeServer, aio: web.Server, watch: Watch) -> None:
        self.edge, self.aio, self.watch = edge, aio, watch

    @property
    def port(self) -> int:
        return self.edge.port


async def _both(ssl_ctx: ssl.SSLContext | None = None, cap: int = 100) -> Both:
    aio = web.Server(_aio)
    watch = Watch(cap)
    edge = EdgeServer(_edge, native=_native, handoff=aio, watcher=watch)
    await edge.start("127.0.0.1", 0, ssl=ssl_ctx)
    return Both(edge, aio, watch)


@pytest.fixture
async def both() -> AsyncIterator[Both]:
    b = await _both()
    yield b
    await b.edge.close(1.0)
    await b.aio.shutdown(1.0)


def _req(path: str, body: bytes = b"") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: t\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body
    )


async def _answer(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    status = int(head.split(b" ", 2)[1])
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return status, await asyncio.wait_for(reader.readexactly(length), 5)


async def test_the_first_request_decides_and_the_rest_follow(both: Both) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", both.port)
    try:
        for path, body, want in [
            ("/fast/a", b"1", b"edge:/fast/a:1"),
            ("/fast/b", b"2", b"edge:/fast/b:2"),
            ("/slow", b"3", b"aiohttp:/slow:3"),  # handed over here
            ("/fast/c", b"4", b"aiohttp:/fast/c:4"),  # aiohttp's for good
        ]:
            writer.write(_req(path, body))
            assert await _answer(reader) == (200, want)
        assert not both.edge.connections  # no longer the edge's
        assert len(both.aio.connections) == 1
        assert both.watch.conns == set()  # forgotten at the hand-over
    finally:
        writer.close()


async def test_a_request_line_in_single_bytes_is_routed_right(both: Both) -> None:
    for path, want in [("/fast/x", b"edge:/fast/x:ab"), ("/other", b"aiohttp:/other:ab")]:
        reader, writer = await asyncio.open_connection("127.0.0.1", both.port)
        try:
            for i, byte in enumerate(_req(path, b"ab")):
                writer.write(bytes([byte]))
                if i % 7 == 0:
                    await writer.drain()
                    await asyncio.sleep(0)
            assert await _answer(reader) == (200, want)
        finally:
            writer.close()


async def test_a_pipelined_request_for_the_other_server_is_refused_clearly(both: Both) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", both.port)
    try:
        writer.write(_req("/fast/1", b"x") + _req("/other", b"y"))
        assert await _answer(reader) == (200, b"edge:/fast/1:x")
        status, body = await _answer(reader)
        assert status == 400
        assert orjson.loads(body)["error"]["code"] == "pipelined_handoff"
        assert await asyncio.wait_for(reader.read(), 5) == b""  # then the close
    finally:
        writer.close()


async def test_close_does_not_wait_for_handed_over_connections(both: Both) -> None:
    async with aiohttp.ClientSession() as s:
        async with s.get(f"http://127.0.0.1:{both.port}/other") as r:
            assert await r.text() == "aiohttp:/other:"
        loop = asyncio.get_running_loop()
        began = loop.time()
        await both.edge.close(5.0)
        assert loop.time() - began < 1.0
        assert len(both.aio.connections) == 1  # still open: aiohttp's to close


async def test_the_watcher_caps_and_counts_the_edge_connections() -> None:
    b = await _both(cap=1)
    try:
        r1, w1 = await asyncio.open_connection("127.0.0.1", b.port)
        w1.write(_req("/fast/1"))
        assert (await _answer(r1))[0] == 200
        assert len(b.watch.conns) == 1
        r2, w2 = await asyncio.open_connection("127.0.0.1", b.port)
        assert await asyncio.wait_for(r2.read(), 5) == b""  # refused by the watcher
        assert b.watch.refused == 1
        w2.close()
        w1.close()
        for _ in range(100):
            if not b.watch.conns:
                break
            await asyncio.sleep(0.01)
        assert not b.watch.conns  # forgotten when it closed
    finally:
        await b.edge.close(1.0)
        await b.aio.shutdown(1.0)


async def test_the_hand_over_works_over_tls() -> None:
    ca = trustme.CA()
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_ctx)
    client_ctx = ssl.create_default_context()
    ca.configure_trust(client_ctx)
    b = await _both(server_ctx)
    try:
        base = f"https://127.0.0.1:{b.port}"
        conn = aiohttp.TCPConnector(limit=1, ssl=client_ctx)
        async with aiohttp.ClientSession(connector=conn) as s:
            for path, want in [
                ("/fast/t", "edge:/fast/t:s"),
                ("/x", "aiohttp:/x:s"),
                ("/fast/t", "aiohttp:/fast/t:s"),  # the connection is aiohttp's now
            ]:
                async with s.post(base + path, data=b"s") as r:
                    assert r.status == 200
                    assert await r.text() == want
            assert len(b.aio.connections) == 1  # one TLS connection, handed over once
    finally:
        await b.edge.close(1.0)
        await b.aio.shutdown(1.0)
