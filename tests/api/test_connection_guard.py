"""The connection guard's shell in-process, on the data port's real path: the edge (smg/edge) on
loopback with no native route, so every connection is handed over to the aiohttp application by
the guard's protocol factory (as smg/app/edge_listener.py does for every route but chat and
completions); raw asyncio clients, and sweeps driven by hand on a fake clock (no test waits out
a deadline). tests/api/test_connection_guard_edge.py has the edge's own routes."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import orjson
import pytest
from aiohttp import web
from support.write_stall import until_stalled

from smg.api import requests as rq
from smg.api.connection_guard import ConnectionGuard, EdgeHandler
from smg.clock import FakeClock, settle
from smg.config import LimitsConfig
from smg.edge.exchange import EdgeRequest, EdgeResponse, Reply, Timeouts
from smg.edge.handoff import native_routes
from smg.edge.server import EdgeServer
from smg.errors import ApiError

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

LIMITS = LimitsConfig(
    header_timeout_secs=10,
    body_timeout_secs=5,
    write_timeout_secs=8,
    max_buffered_request_bytes=64 * 1024,  # small bodies: up to 1 KiB; largest: 48 KiB
)


@dataclass
class Served:
    guard: ConnectionGuard
    clock: FakeClock
    port: int
    stream_ended: asyncio.Event

    async def sweep_after(self, seconds: float) -> None:
        self.clock._now += seconds  # the sweeper's `now`; no timer depends on it here
        self.guard.sweep(self.clock.now())
        await asyncio.sleep(0.05)  # let closes and cancellations land

    async def connect(
        self, rcvbuf: int | None = None
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        s = socket.socket()
        if rcvbuf:  # before connecting, so the window it advertises stays small
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        s.setblocking(False)
        await asyncio.get_running_loop().sock_connect(s, ("127.0.0.1", self.port))
        return await asyncio.open_connection(sock=s)


async def send(w: asyncio.StreamWriter, data: bytes) -> None:
    w.write(data)
    await w.drain()


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    clock = FakeClock()
    guard = ConnectionGuard(LIMITS, max_connections=8, budget_timeout_s=5, clock=clock)
    ended = asyncio.Event()

    async def echo(request: web.Request) -> web.Response:
        raw = await rq.read_body(request, 1 << 30)
        return web.Response(body=orjson.dumps({"len": len(raw), "held": guard.budget.core.held}))

    async def stream(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        try:
            while True:
                await resp.write(b"x" * 65536)
        finally:
            ended.set()

    @web.middleware
    async def errors_as_json(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except ApiError as err:  # what the gateway's edge middleware does, in short
            return web.Response(body=err.to_json(), status=err.status)

    app = web.Application(middlewares=[errors_as_json])
    app.router.add_post("/echo", echo)
    app.router.add_get("/stream", stream)
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    await runner.setup()
    assert runner.server is not None
    edge = EdgeServer(
        edge_route,
        timeouts=Timeouts(header=60, keep_alive=60, body=60, write=60),  # the guard acts first
        native=native_routes(set()),  # every request is handed over
        handoff=guard.factory(runner.server),
        watcher=guard,
    )
    await edge.start("127.0.0.1", 0)
    try:
        yield Served(guard, clock, edge.port, ended)
    finally:
        await edge.close(grace=1.0)
        await runner.cleanup()


async def edge_route(req: EdgeRequest, resp: EdgeResponse) -> Reply | None:
    raise AssertionError(f"no native route, yet the edge served {req.head.path!r}")


def post(length: int | None, body: bytes = b"", chunked: bool = False) -> bytes:
    head = b"POST /echo HTTP/1.1\r\nHost: x\r\n"
    if length is not None:
        head += b"Content-Length: %d\r\n" % length
    if chunked:
        head += b"Transfer-Encoding: chunked\r\n"
    return head + b"\r\n" + body


async def response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    status = int(head.split()[1])
    length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
    return status, await reader.readexactly(length)


async def test_new_connections_owe_their_headers_from_the_start(served: Served) -> None:
    slow, slow_w = await served.connect()
    silent, silent_w = await served.connect()  # sends nothing at all
    await send(slow_w, b"POST /echo HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    await settle()
    # the slow one's request line is handed over; the silent one is still the edge's
    assert sorted(type(c).__name__ for c in served.guard.conns) == ["EdgeHandler", "H1Protocol"]
    await served.sweep_after(9.9)
    assert not slow.at_eof() and not silent.at_eof()
    await served.sweep_after(0.1)  # 10 s after they opened
    assert await asyncio.wait_for(slow.read(), 5) == b""  # closed
    assert await asyncio.wait_for(silent.read(), 5) == b""
    assert served.guard.closed["header_timeout"] == 2
    slow_w.close()
    silent_w.close()


async def test_a_kept_alive_connection_owes_headers_from_its_next_first_byte(
    served: Served,
) -> None:
    reader, w = await served.connect()
    await send(w, post(2, b"{}"))
    assert (await response(reader))[0] == 200
    await served.sweep_after(1)
    await served.sweep_after(60)  # idle after a response: the keep-alive timer's business
    assert not reader.at_eof()
    await send(w, b"POST /echo HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    await settle()
    await served.sweep_after(1)  # the first byte is seen: the header clock starts
    await served.sweep_after(9.5)
    assert not reader.at_eof()
    await served.sweep_after(0.5)
    assert await asyncio.wait_for(reader.read(), 5) == b""
    assert served.guard.closed["header_timeout"] == 1
    w.close()


async def test_a_stalled_body_gets_408_and_a_moving_one_does_not(served: Served) -> None:
    reader, s = await served.connect()
    await send(s, post(100, b'{"a": 1'))
    await settle()
    await served.sweep_after(1)
    await served.sweep_after(4.9)
    assert served.guard.closed["body_timeout"] == 0
    await served.sweep_after(0.2)
    status, body = await response(reader)
    assert status == 408 and orjson.loads(body)["error"]["code"] == "request_body_timeout"
    assert await asyncio.wait_for(reader.read(), 5) == b""  # and the connection closes
    s.close()
    await settle()
    assert served.guard.budget.core.held == 0  # its 100 bytes came back


async def test_a_chunked_body_takes_a_small_grant_then_the_largest(served: Served) -> None:
    reader, s = await served.connect()
    await send(s, post(None, chunked=True) + b"200\r\n" + b"x" * 512 + b"\r\n")
    await settle()
    assert served.guard.budget.core.held == 1024  # room for a small body first
    await send(s, b"800\r\n" + b"y" * 2048 + b"\r\n")
    await settle()
    assert served.guard.budget.core.held == 48 * 1024  # grown: room for the largest
    await send(s, b"0\r\n\r\n")
    status, body = await response(reader)
    assert status == 200 and orjson.loads(body) == {"len": 2560, "held": 2560}  # trimmed
    await settle()
    assert served.guard.budget.core.held == 0  # and given back with the response
    s.close()


async def test_a_chunked_body_past_the_largest_gets_413(served: Served) -> None:
    reader, s = await served.connect()
    await send(s, post(None, chunked=True))
    for _ in range(60):  # 60 KiB in 1 KiB chunks: past the 48 KiB largest
        await send(s, b"400\r\n" + b"z" * 1024 + b"\r\n")
    status, body = await response(reader)
    assert status == 413 and "max_buffered_request_bytes" in orjson.loads(body)["error"]["message"]
    s.close()
    await settle()
    assert served.guard.budget.core.held == 0


async def test_a_client_that_takes_nothing_is_aborted_and_its_handler_ends(served: Served) -> None:
    _, s = await served.connect(rcvbuf=4096)
    await send(s, b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
    await settle()
    (h,) = served.guard.conns
    assert isinstance(h, EdgeHandler)  # handed over to aiohttp

    await until_stalled(h)
    await served.sweep_after(1)
    await served.sweep_after(7)
    assert not served.stream_ended.is_set()
    await served.sweep_after(1.5)
    await asyncio.wait_for(served.stream_ended.wait(), 5)  # the handler was cancelled
    assert served.guard.closed["write_stall"] == 1
    assert not served.guard.conns
    s.close()


async def test_past_the_cap_a_connection_gets_503_and_is_closed(served: Served) -> None:
    held = [await served.connect() for _ in range(8)]
    await settle()
    assert len(served.guard.conns) == 8
    reader, s = await served.connect()
    status, body = await response(reader)
    assert status == 503 and orjson.loads(body)["error"]["code"] == "too_many_connections"
    assert await asyncio.wait_for(reader.read(), 5) == b""
    assert served.guard.closed["over_limit"] == 1
    s.close()
    for _, sock in held:
        sock.close()
    await asyncio.sleep(0.05)
    assert not served.guard.conns
