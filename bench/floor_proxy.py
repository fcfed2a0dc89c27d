#!/usr/bin/env python3
"""The floor under a Python gateway's CPU per request and per streamed token: the least an
HTTP/1.1 relay can do.

Bare relays of `POST /v1/chat/completions` to one upstream worker, with nothing of a gateway
(no auth, limits, routing, metrics, errors): what is left is the transport alone. aiohttp, raw,
aioserver and lean read whole answers (non-streaming chat only); splice and reframe relay
streams as they arrive.

    --impl aiohttp  aiohttp's web server + one ClientSession (what smg serves with today)
    --impl raw      asyncio Protocols with httptools' parsers on both sides, keep-alive pool
    --impl aioserver  aiohttp's web server in front of the same bare upstream as `raw` (the
                    server's share alone)
    --impl lean     smg's own lean server (smg/edge: bounds, timeouts, back-pressure, a task
                    per request) in front of the same bare httptools upstream as `raw`
    --impl splice   no HTTP at all: per client connection one upstream connection, bytes
                    forwarded both ways as they arrive (write back-pressure pauses the other
                    side): the floor of any asyncio relay, streamed or not
    --impl reframe  httptools on both sides, one upstream connection per client connection, the
                    answer relayed as it arrives: each upstream body piece re-framed as one
                    HTTP/1.1 chunk (the least a relay that parses can do per streamed token)

Run each in the shared bench harness as `ours1` beside the Rust gateway and smg (bench/floor.sh),
so the three are measured side by side in one run. Loopback only; for measurement, not serving.

    python bench/floor_proxy.py --impl raw --port 18902 --upstream http://127.0.0.1:18901
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

MODELS = b'{"object":"list","data":[{"id":"fake-model","object":"model"}]}'
CHAT = b"/v1/chat/completions"


async def serve_app(port: int, relay: Callable[[bytes], Awaitable[tuple[int, bytes]]]) -> None:
    """aiohttp's web server with the chat route relayed by `relay` and /v1/models from memory."""
    from aiohttp import web

    async def chat(request: web.Request) -> web.Response:
        status, data = await relay(await request.read())
        return web.Response(body=data, status=status, content_type="application/json")

    async def models(_: web.Request) -> web.Response:
        return web.Response(body=MODELS, content_type="application/json")

    app = web.Application()
    app.router.add_post(CHAT.decode(), chat)
    app.router.add_get("/v1/models", models)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    await asyncio.Event().wait()


async def serve_aiohttp(port: int, upstream: str) -> None:
    from aiohttp import ClientSession, TCPConnector

    session = ClientSession(connector=TCPConnector(limit=0), auto_decompress=False)
    url = upstream + CHAT.decode()

    async def relay(body: bytes) -> tuple[int, bytes]:
        async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as r:
            return r.status, await r.read()

    await serve_app(port, relay)


def raw_upstream(upstream: str) -> Callable[[bytes], Awaitable[tuple[int, bytes]]]:
    """A bare httptools client of the worker's chat route, with a keep-alive pool."""
    import httptools

    parts = urlsplit(upstream)
    host, up_port = parts.hostname or "127.0.0.1", parts.port or 80
    idle: list[Upstream] = []
    head = b"POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n" % (
        CHAT,
        host.encode(),
    )

    class Upstream(asyncio.Protocol):
        def __init__(self) -> None:
            self.parser = httptools.HttpResponseParser(self)
            self.body: list[bytes] = []
            self.waiter: asyncio.Future[tuple[int, bytes]] | None = None
            self.transport: asyncio.Transport | None = None

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport = transport  # type: ignore[assignment]

        def data_received(self, data: bytes) -> None:
            self.parser.feed_data(data)

        def on_body(self, body: bytes) -> None:
            self.body.append(body)

        def on_message_complete(self) -> None:
            waiter, self.waiter = self.waiter, None
            body, self.body = b"".join(self.body), []
            if waiter is not None and not waiter.done():
                waiter.set_result((self.parser.get_status_code(), body))

        def connection_lost(self, exc: Exception | None) -> None:
            if self in idle:
                idle.remove(self)
            if self.waiter is not None and not self.waiter.done():
                self.waiter.set_exception(ConnectionError("upstream closed"))

    async def relay(body: bytes) -> tuple[int, bytes]:
        loop = asyncio.get_running_loop()
        if idle:
            up = idle.pop()
        else:
            _, up = await loop.create_connection(Upstream, host, up_port)
        assert up.transport is not None
        up.waiter = loop.create_future()
        up.transport.write(head + b"Content-Length: %d\r\n\r\n" % len(body) + body)
        answer = await up.waiter
        idle.append(up)
        return answer

    return relay


_TASKS: set[asyncio.Task[None]] = set()


def keep(task: asyncio.Task[None]) -> None:
    """Hold a task until it is done (the loop keeps only a weak reference)."""
    _TASKS.add(task)
    task.add_done_callback(_TASKS.discard)


class Requests(asyncio.Protocol):
    """A client connection's requests, parsed with httptools; each whole one to `answer`."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        import httptools

        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""
        self.body: list[bytes] = []

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_url(self, url: bytes) -> None:
        self.url = url

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        body, self.body = b"".join(self.body), []
        keep(asyncio.get_running_loop().create_task(self.answer(self.url, body)))

    async def answer(self, url: bytes, body: bytes) -> None:
        raise NotImplementedError


async def serve_raw(port: int, upstream: str) -> None:
    relay = raw_upstream(upstream)

    class Client(Requests):
        async def answer(self, url: bytes, body: bytes) -> None:
            if url == CHAT:
                status, data = await relay(body)
            else:
                status, data = 200, MODELS
            self.transport.write(
                b"HTTP/1.1 %d OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                % (status, len(data))
                + data
            )

    loop = asyncio.get_running_loop()
    await loop.create_server(Client, "127.0.0.1", port)
    await asyncio.Event().wait()


async def serve_lean(port: int, upstream: str) -> None:
    from smg.edge.server import EdgeRequest, EdgeResponse, EdgeServer, Reply

    relay = raw_upstream(upstream)
    models = Reply(200, MODELS)

    async def handler(req: EdgeRequest, _: EdgeResponse) -> Reply:
        if req.head.path == CHAT:
            status, data = await relay(await req.read())
            return Reply(status, data)
        return models

    await EdgeServer(handler).start("127.0.0.1", port)
    await asyncio.Event().wait()


async def serve_aioserver(port: int, upstream: str) -> None:
    """aiohttp's web server in front of the bare httptools upstream: the server's share alone."""
    await serve_app(port, raw_upstream(upstream))


class Spliced(asyncio.Protocol):
    """One side of a splice: what arrives here is written to `peer` as is."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: Spliced | None = None
        self.early: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        peer = self.peer
        if peer is not None and peer.transport is not None:
            peer.transport.write(data)
        else:
            self.early.append(data)

    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()


async def serve_splice(port: int, upstream: str) -> None:
    parts = urlsplit(upstream)
    host, up_port = parts.hostname or "127.0.0.1", parts.port or 80
    loop = asyncio.get_running_loop()

    async def join(client: Spliced) -> None:
        try:
            _, up = await loop.create_connection(Spliced, host, up_port)
        except OSError:
            if client.transport is not None:
                client.transport.close()
            return
        up.peer, client.peer = client, up
        assert up.transport is not None
        for data in client.early:
            up.transport.write(data)
        client.early.clear()

    class Client(Spliced):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            keep(loop.create_task(join(self)))

    await loop.create_server(Client, "127.0.0.1", port)
    await asyncio.Event().wait()


async def serve_reframe(port: int, upstream: str) -> None:
    import httptools

    parts = urlsplit(upstream)
    host, up_port = parts.hostname or "127.0.0.1", parts.port or 80
    loop = asyncio.get_running_loop()
    chunked = b"HTTP/1.1 %d OK\r\nContent-Type: %s\r\nTransfer-Encoding: chunked\r\n\r\n"

    class Upstream(asyncio.Protocol):
        """The worker's side: its answer's body pieces go to the client as they arrive."""

        def __init__(self, client: asyncio.Transport) -> None:
            self.client = client
            self.parser = httptools.HttpResponseParser(self)
            self.ctype = b"application/json"
            self.field = b""

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport: asyncio.Transport = transport  # type: ignore[assignment]

        def data_received(self, data: bytes) -> None:
            self.parser.feed_data(data)

        def on_header(self, name: bytes, value: bytes) -> None:
            if name.lower() == b"content-type":
                self.ctype = value

        def on_headers_complete(self) -> None:
            self.client.write(chunked % (self.parser.get_status_code(), self.ctype))

        def on_body(self, body: bytes) -> None:
            self.client.write(b"%x\r\n%b\r\n" % (len(body), body))

        def on_message_complete(self) -> None:
            self.client.write(b"0\r\n\r\n")

        def connection_lost(self, exc: Exception | None) -> None:
            self.client.close()

    class Client(Requests):
        up: Upstream | None = None

        async def answer(self, url: bytes, body: bytes) -> None:
            if self.up is None:
                _, self.up = await loop.create_connection(
                    lambda: Upstream(self.transport), host, up_port
                )
            method = b"POST" if body else b"GET"
            self.up.transport.write(
                b"%s %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%b" % (method, url, host.encode(), len(body), body)
            )

        def pause_writing(self) -> None:
            if self.up is not None:
                self.up.transport.pause_reading()

        def resume_writing(self) -> None:
            if self.up is not None:
                self.up.transport.resume_reading()

        def connection_lost(self, exc: Exception | None) -> None:
            if self.up is not None:
                self.up.transport.close()

    await loop.create_server(Client, "127.0.0.1", port)
    await asyncio.Event().wait()


IMPLS = {
    "aiohttp": serve_aiohttp,
    "raw": serve_raw,
    "lean": serve_lean,
    "aioserver": serve_aioserver,
    "splice": serve_splice,
    "reframe": serve_reframe,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--impl", choices=tuple(IMPLS), required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--upstream", required=True, help="the worker's base URL")
    args = ap.parse_args()
    import uvloop

    uvloop.run(IMPLS[args.impl](args.port, args.upstream.rstrip("/")))


if __name__ == "__main__":
    main()
