"""The connection guard watching the lean edge (smg/edge) as well as aiohttp: one port where the
edge serves its native routes and hands other connections to aiohttp, both kinds admitted,
counted and swept by one guard. Real loopback sockets, sweeps driven by hand on a fake clock."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass

import orjson
import pytest
from aiohttp import web
from support.write_stall import until_stalled

from smg.api.connection_guard import ConnectionGuard, EdgeHandler
from smg.clock import FakeClock, settle
from smg.config import LimitsConfig
from smg.edge.exchange import EdgeRequest, EdgeResponse, Reply, Timeouts
from smg.edge.handoff import native_routes
from smg.edge.protocol import H1Protocol
from smg.edge.server import EdgeServer

LIMITS = LimitsConfig(header_timeout_secs=10, body_timeout_secs=5, write_timeout_secs=8)
CAP = 4


@dataclass
class OnePort:
    guard: ConnectionGuard
    clock: FakeClock
    edge: EdgeServer
    stream_ended: asyncio.Event

    async def sweep_after(self, seconds: float) -> None:
        self.clock._now += seconds
        self.guard.sweep(self.clock.now())
        await asyncio.sleep(0.05)  # let closes and cancellations land

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection("127.0.0.1", self.edge.port)

    def kinds(self) -> list[str]:
        return sorted(type(c).__name__ for c in self.guard.conns)


async def admin(request: web.Request) -> web.Response:
    return web.json_response({"aiohttp": request.path})


@pytest.fixture
async def one_port() -> AsyncIterator[OnePort]:
    ended = asyncio.Event()

    async def chat(req: EdgeRequest, resp: EdgeResponse) -> Reply | None:
        if req.head.path == b"/v1/stream":  # forever, to a client that may not read
            await resp.start(200, ((b"Content-Type", b"text/event-stream"),))
            try:
                while True:
                    await resp.write(b"x" * 65536)
            finally:
                ended.set()
        body = await req.read()
        return Reply(200, orjson.dumps({"edge": len(body)}))

    clock = FakeClock()
    guard = ConnectionGuard(LIMITS, max_connections=CAP, budget_timeout_s=5, clock=clock)
    app = web.Application()
    app.router.add_get("/workers", admin)
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    await runner.setup()
    assert runner.server is not None
    edge = EdgeServer(
        chat,
        timeouts=Timeouts(header=60, keep_alive=60, body=60, write=60),  # the guard acts first
        max_connections=1,  # not applied: the guard's cap counts both kinds
        native=native_routes({(b"POST", b"/v1/chat/completions"), (b"GET", b"/v1/stream")}),
        handoff=guard.factory(runner.server),
        watcher=guard,
    )
    await edge.start("127.0.0.1", 0)
    try:
        yield OnePort(guard, clock, edge, ended)
    finally:
        await edge.close(grace=1.0)
        await runner.cleanup()


def chat_request(body: bytes, length: int | None = None) -> bytes:
    n = len(body) if length is None else length
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % n
    return head + body


async def response(reader: asyncio.StreamReader) -> tuple[int, dict[str, object]]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
    return int(head.split()[1]), orjson.loads(await reader.readexactly(length))


async def test_a_slowloris_head_on_an_edge_connection_is_cut(one_port: OnePort) -> None:
    slow, slow_w = await one_port.connect()
    held, held_w = await one_port.connect()  # a request line the edge still holds
    silent, silent_w = await one_port.connect()
    slow_w.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    held_w.write(b"POST /v1/chat/comp")
    await settle()
    assert one_port.kinds() == ["H1Protocol"] * 3
    await one_port.sweep_after(9.9)
    assert not slow.at_eof() and not held.at_eof() and not silent.at_eof()
    await one_port.sweep_after(0.1)
    for reader in (slow, held, silent):
        assert await asyncio.wait_for(reader.read(), 5) == b""
    assert one_port.guard.closed["header_timeout"] == 3
    assert not one_port.guard.conns and not one_port.edge.connections
    for w in (slow_w, held_w, silent_w):
        w.close()


async def test_a_kept_alive_edge_connection_is_left_alone(one_port: OnePort) -> None:
    reader, w = await one_port.connect()
    w.write(chat_request(b"{}"))
    assert await response(reader) == (200, {"edge": 2})
    await one_port.sweep_after(1)
    await one_port.sweep_after(30)  # idle after an answer: the keep-alive timer's business
    assert not reader.at_eof()
    w.write(chat_request(b"{}"))
    assert await response(reader) == (200, {"edge": 2})
    w.close()


async def test_a_stalled_body_on_an_edge_connection_gets_408(one_port: OnePort) -> None:
    reader, w = await one_port.connect()
    w.write(chat_request(b'{"a": 1', length=100))
    await settle()
    (conn,) = one_port.guard.conns
    assert isinstance(conn, H1Protocol) and conn.sample().reading_body
    await one_port.sweep_after(1)
    await one_port.sweep_after(4.9)
    assert one_port.guard.closed["body_timeout"] == 0
    await one_port.sweep_after(0.2)
    status, body = await response(reader)
    error = body["error"]
    assert status == 408 and isinstance(error, dict)
    assert error["code"] == "request_body_timeout" and "5 s" in str(error["message"])
    assert await asyncio.wait_for(reader.read(), 5) == b""  # and the connection closes
    assert one_port.guard.closed["body_timeout"] == 1
    w.close()


async def test_the_cap_counts_edge_and_handed_over_connections_together(
    one_port: OnePort,
) -> None:
    clients = [await one_port.connect() for _ in range(CAP)]
    for i, (reader, w) in enumerate(clients):
        if i % 2:
            w.write(b"GET /workers HTTP/1.1\r\nHost: x\r\n\r\n")  # handed over to aiohttp
            assert await response(reader) == (200, {"aiohttp": "/workers"})
        else:
            w.write(chat_request(b"{}"))
            assert await response(reader) == (200, {"edge": 2})
    assert one_port.kinds() == ["EdgeHandler", "EdgeHandler", "H1Protocol", "H1Protocol"]
    assert len(one_port.edge.connections) == 2  # past the edge's own max_connections=1
    reader, w = await one_port.connect()
    status, body = await response(reader)
    error = body["error"]
    assert status == 503 and isinstance(error, dict) and error["code"] == "too_many_connections"
    assert await asyncio.wait_for(reader.read(), 5) == b""
    assert one_port.guard.closed["over_limit"] == 1
    w.close()
    for _, cw in clients:
        cw.close()
    await asyncio.sleep(0.1)
    assert not one_port.guard.conns and not one_port.edge.connections


async def test_a_handed_over_connection_is_counted_once(one_port: OnePort) -> None:
    reader, w = await one_port.connect()
    await settle()
    (before,) = one_port.guard.conns
    assert isinstance(before, H1Protocol)
    w.write(b"GET /workers HTTP/1.1\r\nHost: x\r\n\r\n")
    assert await response(reader) == (200, {"aiohttp": "/workers"})
    (after,) = one_port.guard.conns
    assert isinstance(after, EdgeHandler) and after.admitted and after.rx > 0
    await one_port.sweep_after(1)
    await one_port.sweep_after(30)  # kept alive by aiohttp now, swept as an EdgeHandler
    assert not reader.at_eof() and one_port.guard.conns == {after}
    w.close()
    await asyncio.sleep(0.1)
    assert not one_port.guard.conns


async def test_an_edge_client_that_takes_nothing_is_aborted(one_port: OnePort) -> None:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window: fills fast
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", one_port.edge.port))
    _, w = await asyncio.open_connection(sock=sock)
    w.write(b"GET /v1/stream HTTP/1.1\r\nHost: x\r\n\r\n")
    await settle()
    (conn,) = one_port.guard.conns
    assert await until_stalled(conn) > 0
    await one_port.sweep_after(1)
    await one_port.sweep_after(7)
    assert not one_port.stream_ended.is_set()
    await one_port.sweep_after(1.5)
    await asyncio.wait_for(one_port.stream_ended.wait(), 5)  # its handler was cancelled
    assert one_port.guard.closed["write_stall"] == 1
    assert not one_port.guard.conns and not one_port.edge.connections
    w.close()
