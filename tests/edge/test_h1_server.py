"""The asyncio shell over real sockets: curl, aiohttp's client and raw sockets against a tiny app.

The server runs in the test's loop; curl runs as a child process (hence the integration tier).
"""

from __future__ import annotations

import asyncio
import ssl
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import orjson
import pytest
import trustme
from support.ports import free_port

from smg.edge.h1 import Limits
from smg.edge.server import EdgeRequest, EdgeResponse, EdgeServer, Reply, Timeouts
from smg.errors import ApiError

BENCH = Path(__file__).resolve().parents[2] / "bench"

pytestmark = pytest.mark.integration


class App:
    """A tiny app: what each handler saw, and whether the slow one was cancelled."""

    def __init__(self) -> None:
        self.peers: list[object] = []
        self.cancelled = asyncio.Event()
        self.started = asyncio.Event()
        self.written = 0
        self.after: list[str] = []  # what /after did once its answer was out

    async def __call__(self, req: EdgeRequest, resp: EdgeResponse) -> Reply | None:
        self.peers.append(req.peer)
        path = req.head.path
        if path == b"/hello":
            return Reply(200, b'{"ok":true}')
        if path == b"/echo":
            body = await req.read()
            delay = float(req.head.query or 0)
            await asyncio.sleep(delay)  # pipelined answers must still come back in order
            return Reply(200, body, ((b"Content-Type", b"application/octet-stream"),))
        if path == b"/send":
            await resp.send(201, b'{"sent":true}', ((b"X-Kind", b"send"),))
            return None
        if path == b"/ignore":
            return Reply(202, b"{}")
        if path == b"/stream":
            await resp.start(200, ((b"Content-Type", b"text/event-stream"),))
            for i in range(3):
                await resp.write(b"data: %d\n\n" % i)
            await resp.end()
            return None
        if path == b"/big":  # 32 MiB to a client that may not read: drain must hold us back
            await resp.start(200, ((b"Content-Type", b"application/octet-stream"),), 32 << 20)
            block = b"b" * (1 << 20)
            for _ in range(32):
                await resp.write(block)
                self.written += len(block)
            await resp.end()
            return None
        if path == b"/slow":
            self.started.set()
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
            return Reply(200, b"{}")
        if path == b"/after":  # the answer whole, then work of the gateway's own
            await resp.start(200, ((b"Content-Type", b"text/event-stream"),))
            await resp.end(b"data: [DONE]\n\n")
            self.started.set()
            try:
                await asyncio.sleep(0.3)
            except asyncio.CancelledError:
                self.after.append("cancelled")
                raise
            self.after.append("finished")
            return None
        if path == b"/missing":
            raise ApiError(404, "unknown_url", "no such thing")
        if path == b"/boom":
            raise RuntimeError("secret detail that must not leak")
        return Reply(404, b'{"error":"nope"}')


@pytest.fixture
async def app_server() -> AsyncIterator[tuple[App, EdgeServer]]:
    app = App()
    server = EdgeServer(
        app,
        limits=Limits(max_body=4 << 20, max_pipeline=4),
        timeouts=Timeouts(header=0.5, keep_alive=5.0, body=0.5, write=5.0),
    )
    await server.start("127.0.0.1", 0)
    yield app, server
    await server.close()


async def curl(*args: str) -> tuple[int, bytes, bytes]:
    proc = await asyncio.create_subprocess_exec(
        "curl", "-sS", "--max-time", "10", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate()
    return proc.returncode or 0, out, err


async def raw_exchange(port: int, data: bytes, *, timeout: float = 5.0) -> bytes:
    """Send `data`, read until the server closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    try:
        return await asyncio.wait_for(reader.read(-1), timeout)
    finally:
        writer.close()


async def test_curl_reuses_the_connection_and_streams(app_server: tuple[App, EdgeServer]) -> None:
    app, server = app_server
    base = f"http://127.0.0.1:{server.port}"
    rc, out, err = await curl(f"{base}/hello", f"{base}/hello", f"{base}/stream")
    assert rc == 0, err
    assert out == b'{"ok":true}{"ok":true}data: 0\n\ndata: 1\n\ndata: 2\n\n'
    assert len(app.peers) == 3 and len(set(app.peers)) == 1  # one connection, kept alive


async def test_curl_expect_continue_and_large_echo(app_server: tuple[App, EdgeServer]) -> None:
    _, server = app_server
    body = bytes(range(256)) * 4096  # 1 MiB
    rc, out, err = await _curl_stdin(server.port, body)
    assert rc == 0, err
    assert out == body
    assert b"< HTTP/1.1 100 Continue" in err  # sent when the handler began to read


async def _curl_stdin(port: int, body: bytes) -> tuple[int, bytes, bytes]:
    proc = await asyncio.create_subprocess_exec(
        "curl", "-sSv", "--max-time", "10", "-H", "Expect: 100-continue",
        "-H", "Content-Type: application/octet-stream", "--data-binary", "@-",
        f"http://127.0.0.1:{port}/echo",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate(body)
    return proc.returncode or 0, out, err


async def test_aiohttp_client_keep_alive_errors_and_limits(
    app_server: tuple[App, EdgeServer],
) -> None:
    app, server = app_server
    base = f"http://127.0.0.1:{server.port}"
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as s:
        for i in range(5):
            async with s.post(f"{base}/echo", data=b"x" * i) as r:
                assert r.status == 200 and await r.read() == b"x" * i
        assert len(set(app.peers)) == 1  # five requests, one connection
        async with s.get(f"{base}/send") as r:
            assert (r.status, r.headers["X-Kind"]) == (201, "send")
            assert await r.read() == b'{"sent":true}'
        async with s.head(f"{base}/hello") as r:
            assert r.status == 200 and r.headers["Content-Length"] == "11"
            assert await r.read() == b""  # a HEAD answer has no body
        assert len(set(app.peers)) == 1
        async with s.post(f"{base}/ignore", data=b"y" * 100_000) as r:
            assert r.status == 202  # answered without reading: served, then closed if unread
        async with s.get(f"{base}/boom") as r:
            assert r.status == 500 and r.headers["Connection"] == "close"
            err = orjson.loads(await r.read())["error"]
            assert err["code"] == "internal_error" and "secret" not in err["message"]
        async with s.post(f"{base}/echo", data=b"z" * (5 << 20)) as r:
            assert r.status == 413  # over max_body, judged from Content-Length
            assert orjson.loads(await r.read())["error"]["code"] == "body_too_large"


async def test_pipelined_requests_are_answered_in_order(app_server: tuple[App, EdgeServer]) -> None:
    _, server = app_server
    reqs = b"".join(
        b"POST /echo?%s HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\n\r\n%d" % (delay, n)
        for n, delay in enumerate((b"0.2", b"0.1", b"0", b"0.05", b"0", b"0"))
    )
    reqs += b"GET /hello HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    out = await raw_exchange(server.port, reqs)
    bodies = [part.split(b"\r\n\r\n", 1)[1][:1] for part in out.split(b"HTTP/1.1 ")[1:]]
    assert bodies == [b"0", b"1", b"2", b"3", b"4", b"5", b"{"]
    assert out.count(b"HTTP/1.1 200 OK") == 7


async def test_a_slow_header_sender_gets_408_and_the_close(
    app_server: tuple[App, EdgeServer],
) -> None:
    _, server = app_server
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    started = time.monotonic()
    writer.write(b"GET /hello HTTP/1.1\r\nHost: t\r\n")
    reading = asyncio.create_task(reader.read(-1))
    for _ in range(30):  # a header byte every 0.1 s: always some progress, never the end
        await asyncio.wait([reading], timeout=0.1)
        if reading.done():
            break
        try:
            writer.write(b"X")
            await writer.drain()
        except ConnectionError:
            break
    out = await asyncio.wait_for(reading, 3)
    elapsed = time.monotonic() - started
    writer.close()
    assert out.startswith(b"HTTP/1.1 408 Request Timeout\r\n")
    assert b'"code":"request_header_timeout"' in out
    assert 0.4 < elapsed < 2.5  # header timeout 0.5 s, though a byte came every 0.1 s


async def test_a_slow_second_head_on_a_kept_connection_gets_408(
    app_server: tuple[App, EdgeServer],
) -> None:
    """The head timer is armed only when a request's first bytes do not hold its whole head:
    a whole head (the first request) starts at once, a partial one after it is still timed."""
    _, server = app_server
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"GET /hello HTTP/1.1\r\nHost: t\r\n\r\n")
    first = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 3)
    assert first.startswith(b"HTTP/1.1 200")
    length = int(first.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    await reader.readexactly(length)
    started = time.monotonic()
    writer.write(b"GET /hello HTTP/1.1\r\nHost: t\r\n")  # and never the blank line
    out = await asyncio.wait_for(reader.read(-1), 4)
    elapsed = time.monotonic() - started
    writer.close()
    assert out.startswith(b"HTTP/1.1 408 Request Timeout\r\n")
    assert 0.4 < elapsed < 2.5  # header timeout 0.5 s; the idle one (5 s) would be too late


async def test_an_idle_connection_is_closed_quietly(app_server: tuple[App, EdgeServer]) -> None:
    _, server = app_server
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    assert await asyncio.wait_for(reader.read(-1), 3) == b""  # nothing sent: closed, no 408
    writer.close()


async def test_a_client_that_disconnects_cancels_its_handler(
    app_server: tuple[App, EdgeServer],
) -> None:
    app, server = app_server
    _reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"GET /slow HTTP/1.1\r\nHost: t\r\n\r\n")
    await asyncio.wait_for(app.started.wait(), 3)
    writer.close()
    await asyncio.wait_for(app.cancelled.wait(), 3)
    await asyncio.sleep(0.05)
    assert not server.connections


async def test_writes_wait_for_a_client_that_does_not_read(
    app_server: tuple[App, EdgeServer],
) -> None:
    app, server = app_server
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port, limit=1 << 16)
    writer.transport.pause_reading()  # type: ignore[attr-defined]
    writer.write(b"GET /big HTTP/1.1\r\nHost: t\r\n\r\n")
    await asyncio.sleep(0.5)
    stalled = app.written
    assert stalled < 32 << 20  # held back by pause_writing, not buffered whole
    writer.transport.resume_reading()  # type: ignore[attr-defined]
    total = 0
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 3)
    assert b"Content-Length: 33554432" in head
    while total < 32 << 20:
        chunk = await asyncio.wait_for(reader.read(1 << 20), 3)
        assert chunk
        total += len(chunk)
    assert total == 32 << 20 and app.written == 32 << 20
    writer.close()


@pytest.mark.parametrize(
    ("raw", "status", "code"),
    [
        (b"GET / HTTP/1.1\r\n" + b"X-Big: " + b"a" * 40000 + b"\r\n\r\n", 431, "header_too_large"),
        (b"POST /echo HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 501,
         "transfer_encoding_not_implemented"),
        (b"GET / HTTP/2.0\r\n\r\n", 505, "http_version_not_supported"),
        (b"\x16\x03\x01 not http\r\n\r\n", 400, "malformed_request"),
    ],
)  # fmt: skip
async def test_protocol_errors_answer_in_the_error_shape_and_close(
    app_server: tuple[App, EdgeServer], raw: bytes, status: int, code: str
) -> None:
    _, server = app_server
    out = await raw_exchange(server.port, raw)
    head, _, body = out.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 %d " % status) and b"Connection: close" in head
    assert orjson.loads(body)["error"]["code"] == code


async def test_tls_with_trustme(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(server_ctx)
    app = App()
    server = EdgeServer(app, timeouts=Timeouts(header=0.5))
    await server.start("127.0.0.1", 0, ssl=server_ctx)
    try:
        client_ctx = ssl.create_default_context()
        ca.configure_trust(client_ctx)
        base = f"https://127.0.0.1:{server.port}"
        async with aiohttp.ClientSession() as s:
            for _ in range(3):
                async with s.post(f"{base}/echo", data=b"secure", ssl=client_ctx) as r:
                    assert r.status == 200 and await r.read() == b"secure"
        assert len(set(app.peers)) == 1
        ca_file = tmp_path / "ca.pem"
        ca.cert_pem.write_to_path(str(ca_file))
        rc, out, err = await curl("--cacert", str(ca_file), f"{base}/stream")
        assert rc == 0, err
        assert out == b"data: 0\n\ndata: 1\n\ndata: 2\n\n"
        rc, _, _ = await curl(f"{base}/hello")  # untrusted: the handshake fails
        assert rc != 0
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        started = time.monotonic()  # no ClientHello ever: the head's deadline covers it
        assert await asyncio.wait_for(reader.read(-1), 5) == b""
        assert time.monotonic() - started < 3.0
        writer.close()
    finally:
        await server.close()


async def test_an_api_error_keeps_the_connection_and_a_500_closes_it(
    app_server: tuple[App, EdgeServer],
) -> None:
    app, server = app_server
    base = f"http://127.0.0.1:{server.port}"
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as s:
        async with s.get(f"{base}/missing") as r:
            assert r.status == 404 and "Connection" not in r.headers
            assert orjson.loads(await r.read())["error"]["code"] == "unknown_url"
        async with s.get(f"{base}/hello") as r:
            assert r.status == 200
        assert len(set(app.peers)) == 1  # the 404 kept the connection
        async with s.get(f"{base}/boom") as r:
            assert r.status == 500
        async with s.get(f"{base}/hello") as r:
            assert r.status == 200
        assert len(set(app.peers)) == 2  # the 500 closed it


async def test_a_chunked_body_over_the_cap_is_413_mid_body(
    app_server: tuple[App, EdgeServer],
) -> None:
    _, server = app_server
    chunk = b"x" * (1 << 20)
    raw = b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
    raw += b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(5)) + b"0\r\n\r\n"
    out = await raw_exchange(server.port, raw)
    head, _, body = out.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413 ") and b"Connection: close" in head
    assert orjson.loads(body)["error"]["code"] == "body_too_large"


async def test_a_stalled_body_gets_408(app_server: tuple[App, EdgeServer]) -> None:
    _, server = app_server
    raw = b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\nabc"
    started = time.monotonic()
    out = await raw_exchange(server.port, raw)
    assert out.startswith(b"HTTP/1.1 408 ") and b'"code":"request_body_timeout"' in out
    assert 0.4 < time.monotonic() - started < 2.5  # body timeout 0.5 s


async def test_http10_and_upgrade_requests_are_answered_then_closed(
    app_server: tuple[App, EdgeServer],
) -> None:
    _, server = app_server
    rc, out, err = await curl("--http1.0", "-i", f"http://127.0.0.1:{server.port}/hello")
    assert rc == 0, err
    assert out.startswith(b"HTTP/1.1 200 OK\r\n") and b"Connection: close\r\n" in out
    upgrade = b"GET /hello HTTP/1.1\r\nHost: t\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n"
    out = await raw_exchange(server.port, upgrade + b"\x81\x05hello")
    assert out.count(b"HTTP/1.1 ") == 1 and b"Connection: close\r\n" in out
    assert out.endswith(b'{"ok":true}')  # served as plain HTTP, then closed: no upgrade


async def test_the_floor_bench_lean_relay_serves(tmp_path: Path) -> None:
    """bench/floor_proxy.py --impl lean (the edge in front of a bare httptools upstream), as
    bench/floor.sh starts it, relays chat to an upstream and answers /v1/models itself."""
    seen: list[bytes] = []

    async def upstream(req: EdgeRequest, _: EdgeResponse) -> Reply:
        seen.append(await req.read())
        return Reply(200, b'{"object":"chat.completion"}')

    up = EdgeServer(upstream)
    await up.start("127.0.0.1", 0)
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(BENCH / "floor_proxy.py"), "--impl", "lean", "--port", str(port),
        "--upstream", f"http://127.0.0.1:{up.port}",
    )  # fmt: skip
    try:
        async with aiohttp.ClientSession() as s:
            for _ in range(50):  # up to 5 s for the child to listen
                try:
                    async with s.get(f"http://127.0.0.1:{port}/v1/models") as r:
                        assert r.status == 200 and b"fake-model" in await r.read()
                        break
                except aiohttp.ClientConnectionError:
                    await asyncio.sleep(0.1)
            else:
                pytest.fail("floor_proxy.py --impl lean never listened")
            for i in range(3):
                url = f"http://127.0.0.1:{port}/v1/chat/completions"
                async with s.post(url, data=b'{"n":%d}' % i) as r:
                    assert r.status == 200
                    assert await r.read() == b'{"object":"chat.completion"}'
        assert seen == [b'{"n":0}', b'{"n":1}', b'{"n":2}']
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 5)
        await up.close()


async def test_close_lets_the_answer_in_flight_finish_and_closes_idle_ones() -> None:
    async def handler(req: EdgeRequest, _: EdgeResponse) -> Reply:
        if req.head.path == b"/slow":
            await asyncio.sleep(0.3)
        return Reply(200, b'{"done":true}')

    server = EdgeServer(handler)
    await server.start("127.0.0.1", 0)
    port = server.port
    idle_r, idle_w = await asyncio.open_connection("127.0.0.1", port)
    idle_w.write(b"GET /quick HTTP/1.1\r\nHost: t\r\n\r\n")
    await asyncio.wait_for(idle_r.readuntil(b'{"done":true}'), 3)  # now idle, kept alive
    busy_r, busy_w = await asyncio.open_connection("127.0.0.1", port)
    busy_w.write(b"GET /slow HTTP/1.1\r\nHost: t\r\n\r\n")
    await asyncio.sleep(0.1)

    async def read_then_close(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> bytes:
        out = await r.read(-1)
        w.close()  # as a client does on EOF: the server's lingering close ends here
        return out

    reads = [asyncio.create_task(read_then_close(idle_r, idle_w))]
    reads.append(asyncio.create_task(read_then_close(busy_r, busy_w)))
    started = time.monotonic()
    await server.close(grace=3.0)
    assert time.monotonic() - started < 2.5  # the answer in flight (0.3 s), not the grace (3 s)
    idle, answer = await asyncio.wait_for(asyncio.gather(*reads), 3)
    assert idle == b""  # the idle one: closed
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and b"Connection: close\r\n" in answer
    assert answer.endswith(b'{"done":true}')  # the busy one: answered, then closed
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", port)  # no longer listening


async def test_connections_over_the_limit_get_503() -> None:
    async def handler(req: EdgeRequest, _: EdgeResponse) -> Reply:
        return Reply(200, b"{}")

    server = EdgeServer(handler, max_connections=2)
    await server.start("127.0.0.1", 0)
    try:
        held = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(2)]
        await asyncio.sleep(0.05)
        out = await raw_exchange(server.port, b"")
        assert out.startswith(b"HTTP/1.1 503 ") and b'"code":"too_many_connections"' in out
        for _, w in held:
            w.close()
        await asyncio.sleep(0.1)
        out = await raw_exchange(server.port, b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n")
        assert out.startswith(b"HTTP/1.1 200 OK\r\n")  # room again once they left
    finally:
        await server.close()


async def test_reading_pauses_at_the_pipeline_bound_and_resumes(
    app_server: tuple[App, EdgeServer],
) -> None:
    _, server = app_server  # max_pipeline=4
    gate = asyncio.Event()
    inner = server.handler

    async def blocking(req: EdgeRequest, resp: EdgeResponse) -> Reply | None:
        if req.head.path == b"/block":
            await asyncio.wait_for(gate.wait(), 5)
        return await inner(req, resp)

    server.handler = blocking
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"GET /block HTTP/1.1\r\nHost: t\r\n\r\n")
    for i in range(8):  # one request per write, so each arrives in its own read
        await asyncio.sleep(0.02)
        writer.write(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\n\r\n%d" % i)
        await writer.drain()
    await asyncio.sleep(0.2)
    (conn,) = server.connections
    assert conn._read_paused and conn.core.queued_heads == 4  # the rest waits in the kernel
    gate.set()
    out = b""
    while out.count(b"HTTP/1.1 ") < 9:  # /block's 404 (the app has no such route), 8 echoes
        out += await asyncio.wait_for(reader.read(65536), 3)
    bodies = [part.split(b"\r\n\r\n", 1)[1][:1] for part in out.split(b"HTTP/1.1 ")[2:]]
    assert bodies == [b"%d" % i for i in range(8)]  # resumed, all answered in order
    writer.close()


async def test_a_client_leaving_after_its_whole_answer_does_not_cancel_the_handler(
    app_server: tuple[App, EdgeServer],
) -> None:
    """A client that reads its whole answer and hangs up (the OpenAI SDK closes after [DONE])
    leaves the handler to finish what it still does; one that leaves mid-answer cancels it."""
    app, server = app_server
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"GET /after HTTP/1.1\r\nHost: x\r\n\r\n")
    data = await asyncio.wait_for(reader.readuntil(b"0\r\n\r\n"), 5)
    assert data.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n")
    await asyncio.wait_for(app.started.wait(), 5)
    writer.close()
    await asyncio.sleep(0.6)
    assert app.after == ["finished"]
    app.started.clear()
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
    await asyncio.wait_for(app.started.wait(), 5)
    writer.close()
    await asyncio.wait_for(app.cancelled.wait(), 5)


@pytest.mark.parametrize("grace", [3.0, 0.05])
async def test_close_waits_within_its_grace_for_a_handler_that_outlived_its_client(
    grace: float,
) -> None:
    """A handler whose client left after the whole answer still counts as in flight: the
    server's close waits for it (SIGTERM drains it), and cancels it once the grace is over."""
    app = App()
    server = EdgeServer(app)
    await server.start("127.0.0.1", 0)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"GET /after HTTP/1.1\r\nHost: x\r\n\r\n")
    await asyncio.wait_for(reader.readuntil(b"0\r\n\r\n"), 5)
    await asyncio.wait_for(app.started.wait(), 5)
    writer.close()
    await asyncio.sleep(0.05)  # the hang-up reaches the server; the handler sleeps on (0.3 s)
    assert len(server.connections) == 1
    await server.close(grace=grace)
    await asyncio.sleep(0)  # a cancelled handler takes its cancellation on the next turn
    assert app.after == (["finished"] if grace > 0.3 else ["cancelled"])
    assert not server.connections
