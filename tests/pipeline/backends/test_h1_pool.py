"""The lean HTTP/1.1 client's shell against real loopback servers: keep-alive reuse and its
limits, the keep-alive race retried once, deadlines, flow control, the address policy, and a
reader that leaves closing the connection (the server sees it)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import pytest

from smg.core.worker_urls import AddressPolicy
from smg.pipeline.backends.address_guard import AddressGuard, DeniedAddress
from smg.pipeline.backends.h1_client import request_bytes
from smg.pipeline.backends.h1_pool import H1Client, Target, _Conn, target_of

OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]


class Server:
    def __init__(self) -> None:
        self.connections = 0
        self.requests = 0
        self.closed = asyncio.Event()  # a client connection ended (EOF or reset)
        self.port = 0


async def read_request(reader: asyncio.StreamReader) -> bytes | None:
    """One request (head + Content-Length body), or None at EOF."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return head + await reader.readexactly(length)


@contextlib.asynccontextmanager
async def serve(handler: Handler) -> AsyncIterator[Server]:
    state = Server()

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        state.connections += 1
        n = state.connections
        try:
            await handler(reader, writer, n)
            await reader.read()  # until the client closes
        except ConnectionError:
            pass
        finally:
            state.closed.set()
            writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    state.port = server.sockets[0].getsockname()[1]
    async with server:
        yield state


async def answer_all(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
    while await read_request(reader) is not None:
        writer.write(OK)
        await writer.drain()


def target(state: Server) -> Target:
    return target_of(f"http://127.0.0.1:{state.port}")


def post(t: Target, body: bytes = b"{}") -> bytes:
    return request_bytes("POST", "/v1/chat/completions", t.host, {"X-A": "1"}, body)


async def test_a_fully_read_keep_alive_answer_leaves_its_connection_for_the_next() -> None:
    async with serve(answer_all) as srv:
        client, t = H1Client(), target(srv)
        for _ in range(3):
            resp = await client.request(t, post(t), 5.0, 5.0)
            assert resp.status == 200 and resp.content_type == "application/json"
            assert resp.content_length == 2 and resp.headers["content-type"] == "application/json"
            assert await resp.content.read() == b"{}" and resp.content.at_eof()
            resp.release()
        assert srv.connections == 1 and client.idle_count(t.key) == 1
        client.close()
        await asyncio.wait_for(srv.closed.wait(), 2)  # closing the pool closes its idle ones


async def test_an_answer_released_unread_or_closed_drops_the_connection() -> None:
    async with serve(answer_all) as srv:
        client, t = H1Client(), target(srv)
        resp = await client.request(t, post(t), 5.0, 5.0)
        resp.close()
        await asyncio.wait_for(srv.closed.wait(), 2)
        assert client.idle_count() == 0


async def test_connection_close_and_http_1_0_answers_are_not_kept() -> None:
    for answer in (
        OK.replace(b"Content-Length", b"Connection: close\r\nContent-Length"),
        OK.replace(b"HTTP/1.1", b"HTTP/1.0"),
    ):

        async def once(
            r: asyncio.StreamReader, w: asyncio.StreamWriter, _: int, a: bytes = answer
        ) -> None:
            await read_request(r)
            w.write(a)

        async with serve(once) as srv:
            client, t = H1Client(), target(srv)
            resp = await client.request(t, post(t), 5.0, 5.0)
            assert await resp.read() == b"{}"
            assert client.idle_count() == 0


async def test_the_keep_alive_race_is_retried_once_on_a_fresh_connection() -> None:
    async def first_only(r: asyncio.StreamReader, w: asyncio.StreamWriter, _: int) -> None:
        await read_request(r)
        w.write(OK)  # keep-alive by default...
        await w.drain()
        await read_request(r)  # ...but the next request on it finds it closed
        w.transport.abort()

    async with serve(first_only) as srv:
        client, t = H1Client(), target(srv)
        resp = await client.request(t, post(t), 5.0, 5.0)
        assert await resp.read() == b"{}" and client.idle_count() == 1
        resp = await client.request(t, post(t), 5.0, 5.0)  # sent on the reused one first
        assert resp.status == 200 and await resp.read() == b"{}"
        assert srv.connections == 2
        client.close()


async def test_a_fresh_connection_closed_before_an_answer_is_not_retried() -> None:
    async def hang_up(r: asyncio.StreamReader, w: asyncio.StreamWriter, _: int) -> None:
        await read_request(r)
        w.transport.abort()

    async with serve(hang_up) as srv:
        client, t = H1Client(), target(srv)
        with pytest.raises(aiohttp.ServerDisconnectedError):
            await client.request(t, post(t), 5.0, 5.0)
        assert srv.connections == 1


async def test_a_connection_the_worker_closes_while_idle_is_dropped() -> None:
    async def answer_then_close(r: asyncio.StreamReader, w: asyncio.StreamWriter, _: int) -> None:
        await read_request(r)
        w.write(OK)
        await w.drain()
        w.close()

    async with serve(answer_then_close) as srv:
        client, t = H1Client(), target(srv)
        resp = await client.request(t, post(t), 5.0, 5.0)
        assert await resp.read() == b"{}"
        for _ in range(100):
            if client.idle_count() == 0:
                break
            await asyncio.sleep(0.01)
        assert client.idle_count() == 0
        resp = await client.request(t, post(t), 5.0, 5.0)
        assert await resp.read() == b"{}" and srv.connections == 2


async def test_idle_connections_close_after_the_keep_alive_time() -> None:
    async with serve(answer_all) as srv:
        client, t = H1Client(keepalive_s=0.2), target(srv)
        resp = await client.request(t, post(t), 5.0, 5.0)
        await resp.read()
        assert client.idle_count() == 1
        await asyncio.wait_for(srv.closed.wait(), 2)
        assert client.idle_count() == 0


async def test_at_most_max_idle_connections_are_kept() -> None:
    async with serve(answer_all) as srv:
        client, t = H1Client(max_idle=2), target(srv)
        answers = await asyncio.gather(*(client.request(t, post(t), 5.0, 5.0) for _ in range(4)))
        for resp in answers:
            await resp.read()
        assert srv.connections == 4 and client.idle_count() == 2
        client.close()


async def test_a_reader_that_leaves_closes_the_upstream_connection() -> None:
    async def silent(r: asyncio.StreamReader, w: asyncio.StreamWriter, _: int) -> None:
        await read_request(r)

    async with serve(silent) as srv:
        client, t = H1Client(), target(srv)
        task = asyncio.create_task(client.request(t, post(t), 5.0, 30.0))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.wait_for(srv.closed.wait(), 2)  # the worker saw the disconnect


async def test_the_deadline_bounds_the_head_and_the_body() -> None:
    async def stall_head(r: asyncio.StreamReader, w: asyncio.StreamWriter, _: int) -> None:
        await read_request(r)

    async def stall_body(r: asyncio.StreamReader, w: asyncio.StreamWriter, _: int) -> None:
        await read_request(r)
        w.write(OK[:-2].replace(b"Length: 2", b"Length: 10") + b"{")

    async with serve(stall_head) as srv:
        client, t = H1Client(), target(srv)
        with pytest.raises(TimeoutError):
            await client.request(t, post(t), 5.0, 0.2)
        await asyncio.wait_for(srv.closed.wait(), 2)
    async with serve(stall_body) as srv:
        client, t = H1Client(), target(srv)
        resp = await client.request(t, post(t), 5.0, 0.3)
        assert await resp.content.readany() == b"{"
        with pytest.raises(TimeoutError):
            await resp.content.readany()
        resp.close()
        await asyncio.wait_for(srv.closed.wait(), 2)


async def test_a_reused_connection_keeps_each_exchange_to_its_own_deadline() -> None:
    """One timer per connection: an earlier exchange's deadline (shorter or longer) neither
    cuts a later one short nor lets it run past its own."""

    async def second_stalls(r: asyncio.StreamReader, w: asyncio.StreamWriter, _: int) -> None:
        n = 0
        while await read_request(r) is not None:
            n += 1
            if n != 2:
                w.write(OK)
                await w.drain()

    # (first deadline, pause, second deadline): the timer fires early and waits for the second;
    # it is moved earlier; it fired (unarmed) while the connection was idle
    for first_s, pause_s, second_s in ((0.3, 0.0, 0.6), (30.0, 0.0, 0.2), (0.2, 0.3, 0.3)):
        async with serve(second_stalls) as srv:
            client, t = H1Client(), target(srv)
            resp = await client.request(t, post(t), 5.0, first_s)
            assert await resp.content.read() == b"{}"
            resp.release()
            await asyncio.sleep(pause_s)
            loop = asyncio.get_running_loop()
            began = loop.time()
            with pytest.raises(TimeoutError):
                await client.request(t, post(t), 5.0, second_s)  # the same connection, stalled
            assert second_s * 0.8 < loop.time() - began < second_s + 1.0
            assert srv.connections == 1
            client.close()


async def test_a_body_that_breaks_off_is_a_payload_error() -> None:
    async def short(r: asyncio.StreamReader, w: asyncio.StreamWriter, _: int) -> None:
        await read_request(r)
        w.write(OK.replace(b"Length: 2", b"Length: 9"))
        await w.drain()
        w.transport.abort()

    async with serve(short) as srv:
        client, t = H1Client(), target(srv)
        resp = await client.request(t, post(t), 5.0, 5.0)
        with pytest.raises(aiohttp.ClientPayloadError):
            await resp.content.read()


async def test_a_malformed_head_is_a_connection_error() -> None:
    async def garbage(r: asyncio.StreamReader, w: asyncio.StreamWriter, _: int) -> None:
        await read_request(r)
        w.write(b"SSH-2.0-OpenSSH_9\r\n\r\n")

    async with serve(garbage) as srv:
        client, t = H1Client(), target(srv)
        with pytest.raises(aiohttp.ClientConnectionError):
            await client.request(t, post(t), 5.0, 5.0)


async def test_an_unread_stream_pauses_reading_and_resumes_as_it_is_read() -> None:
    size = 16 * 1024 * 1024
    sent = asyncio.Event()

    async def big(r: asyncio.StreamReader, w: asyncio.StreamWriter, _: int) -> None:
        await read_request(r)
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size)
        w.write(b"x" * size)
        await w.drain()
        sent.set()

    async with serve(big) as srv:
        client, t = H1Client(), target(srv)
        resp = await client.request(t, post(t), 5.0, 10.0)
        await asyncio.sleep(0.3)
        assert not sent.is_set()  # the client stopped reading: the server's writes back up
        got = 0
        while chunk := await resp.content.readany():
            assert len(chunk) <= 1024 * 1024
            got += len(chunk)
        assert got == size and sent.is_set()
        resp.release()
        assert client.idle_count() == 1
        client.close()


async def test_the_address_policy_holds_at_connect() -> None:
    async with serve(answer_all) as srv:
        guard = AddressGuard(AddressPolicy(deny=["127.0.0.0/8"]))
        client, t = H1Client(guard), target(srv)
        with pytest.raises(DeniedAddress):
            await client.request(t, post(t), 5.0, 5.0)
        assert srv.connections == 0


def test_targets_keep_a_path_prefix_and_name_default_ports() -> None:
    t = target_of("http://w:8000/prefix/")
    assert t.key == ("http", "w", 8000) and t.host == "w:8000" and t.prefix == "/prefix"
    assert target_of("https://w").key == ("https", "w", 443)
    with pytest.raises(ValueError):
        target_of("grpc://w:1")


async def test_bytes_on_an_idle_connection_retire_it() -> None:
    async def chatty(r: asyncio.StreamReader, w: asyncio.StreamWriter, _: int) -> None:
        await read_request(r)
        w.write(OK)
        await w.drain()
        await asyncio.sleep(0.05)
        w.write(b"HTTP/1.1 200 OK\r\n")  # nobody asked

    async with serve(chatty) as srv:
        client, t = H1Client(), target(srv)
        resp = await client.request(t, post(t), 5.0, 5.0)
        assert await resp.read() == b"{}" and client.idle_count() == 1
        await asyncio.wait_for(srv.closed.wait(), 2)
        assert client.idle_count() == 0


class _Transport:
    """What a connection's protocol calls on its transport, doing nothing."""

    def write(self, data: bytes) -> None: ...
    def pause_reading(self) -> None: ...
    def resume_reading(self) -> None: ...
    def close(self) -> None: ...


class _Sink:
    def __init__(self) -> None:
        self.got: list[object] = []

    def data(self, chunk: bytes) -> None:
        self.got.append(chunk)

    def last(self, chunk: bytes) -> None:
        self.got.append(("last", chunk))

    def end(self) -> None:
        self.got.append("end")

    def fail(self, exc: BaseException) -> None:
        self.got.append(exc)


async def test_a_reads_body_pieces_reach_a_piped_body_as_one_piece_in_order() -> None:
    conn = _Conn(None, ("http", "127.0.0.1", 1))  # type: ignore[arg-type]
    conn.connection_made(_Transport())  # type: ignore[arg-type]
    head = conn.send(b"GET / HTTP/1.1\r\n\r\n", conn.loop.time() + 60)
    conn.data_received(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n")
    body = (await head).content
    sink = _Sink()
    body.pipe(sink)
    assert sink.got == [b"a"]
    conn.data_received(b"1\r\nb\r\n2\r\ncd\r\n1\r\ne\r\n")  # body pieces only
    conn.data_received(b"1\r\nf\r\n2\r\ngh\r\n0\r\n\r\n")  # body pieces, then the end
    assert sink.got == [b"a", b"bcde", ("last", b"fgh"), "end"]  # the last ones as such
    if conn.timer is not None:
        conn.timer.cancel()
