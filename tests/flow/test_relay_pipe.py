"""A relayed stream's callback pipe (smg/flow/pipe.py) over real loopback sockets: a scripted raw
HTTP/1.1 worker, the lean client (h1_pool), `HttpRelay.stream`, and the lean edge serving the
client. What must hold: the bytes as the worker sent them, back-pressure from a client that stops
reading to the worker's socket (the worker is held back, nothing piles up), a worker that dies
mid-stream (an SSE error event, then the end; the breaker told once), a client that leaves (the
upstream dropped at once, nothing reported about the worker), the idle limit."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from support.runner_metrics import RecordingMetrics
from support.write_stall import slow_client, until_still

from smg.actors.messages import Outcome
from smg.api.edge_answers import EdgeClient
from smg.clock import LoopClock
from smg.config import RetryConfig
from smg.core.circuit_breaker import BreakerSnapshot, BreakerState
from smg.core.health import HealthStatus
from smg.core.idle import TICKS, IdleSweeper, Watch
from smg.core.retry import RetryPolicy
from smg.core.snapshots import LoadCounter, RegistrySnapshot, SnapshotCell, WorkerSnapshot
from smg.edge.exchange import EdgeRequest, EdgeResponse, Reply
from smg.edge.server import EdgeServer
from smg.flow.pipe import Pipe
from smg.flow.relay import HttpRelay
from smg.flow.runner import Attempt, Runner
from smg.pipeline.backends.h1_body import Body
from smg.pipeline.backends.http import HttpBackend
from smg.pipeline.policies import RoundRobinPolicy

pytestmark = pytest.mark.unit

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
REQUEST = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Content-Length: 2\r\nConnection: close\r\n\r\n{}"
)


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def event(i: int) -> bytes:
    return b'data: {"i": %d}\n\n' % i


Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Mailbox:
    """The worker actor's mailbox as the runner tells it outcomes."""

    def __init__(self) -> None:
        self.told: list[Any] = []

    def tell(self, msg: Any) -> None:
        self.told.append(msg)


@dataclass
class Rig:
    edge: EdgeServer
    mailbox: Mailbox
    worker: WorkerSnapshot
    sweeper: IdleSweeper
    upstream_gone: asyncio.Event = field(default_factory=asyncio.Event)
    settled: asyncio.Event = field(default_factory=asyncio.Event)
    bodies: list[Any] = field(default_factory=list)  # the upstream bodies relayed
    connections: int = 0  # the worker's
    client_writes: list[bytes] = field(default_factory=list)  # what the edge wrote the client

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.edge.port)
        writer.write(REQUEST)
        return reader, writer

    async def answer(self) -> bytes:
        """The whole answer the client reads (head, chunked body, its end)."""
        reader, writer = await self.connect()
        data = await asyncio.wait_for(reader.read(), 5.0)  # the edge closes after it
        writer.close()
        return data


SCRIPT: list[Script] = []


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    gone = asyncio.Event()

    async def worker_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        r.connections += 1
        try:
            while SCRIPT:  # one scripted answer per request, keep-alive
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    return
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                await SCRIPT.pop(0)(reader, writer)
                if reader.at_eof():  # the gateway hung up while it waited
                    gone.set()
                    return
        except ConnectionError:  # ... or while it wrote
            gone.set()
        finally:
            writer.close()

    worker_srv = await asyncio.start_server(worker_conn, "127.0.0.1", 0)
    port = worker_srv.sockets[0].getsockname()[1]
    mailbox = Mailbox()
    worker = WorkerSnapshot(
        worker_id="w1",
        url=f"http://127.0.0.1:{port}",
        model_id="m",
        worker_type="regular",
        health=HealthStatus.READY,
        breaker=BreakerSnapshot(BreakerState.CLOSED, None),
        counter=LoadCounter(),
        breaker_counting=True,
        ref=mailbox,
    )
    sweeper = IdleSweeper(0.4)
    session = aiohttp.ClientSession()
    backend = HttpBackend(session, 30.0, idle=sweeper)
    runner = Runner(
        registry=SnapshotCell(RegistrySnapshot.build(())),
        policy=RoundRobinPolicy(),
        retry=RetryPolicy.from_config(RetryConfig()),
        clock=LoopClock(),
        rng=random.Random(1),
        metrics=RecordingMetrics(),
    )
    relay = HttpRelay(runner, backend)
    settled = asyncio.Event()

    async def handler(req: EdgeRequest, resp: EdgeResponse) -> Reply | None:
        await req.read()
        transport = resp._conn.transport  # type: ignore[attr-defined]
        write = transport.write  # (asyncio's own transport: its write can be wrapped)

        def spy(data: bytes) -> None:
            r.client_writes.append(bytes(data))
            write(data)

        transport.write = spy
        upstream = await backend.open(worker, "/v1/chat/completions", b"{}", {})
        r.bodies.append(upstream.content)
        worker.counter.active += 1
        attempt = Attempt(worker, upstream, 1)
        client = EdgeClient(req.head, "/v1/chat/completions", resp, None, None)
        try:
            await relay.stream(client, attempt, "rid-1")  # type: ignore[arg-type]
        finally:
            settled.set()
        return None

    edge = EdgeServer(handler)
    r = Rig(edge, mailbox, worker, sweeper, gone, settled)
    await edge.start("127.0.0.1", 0)
    yield r
    await edge.close()
    worker_srv.close()
    backend.close()
    await session.close()
    SCRIPT.clear()


def body_of(answer: bytes) -> bytes:
    """The de-chunked body of one chunked HTTP/1.1 answer."""
    head, _, rest = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    assert b"transfer-encoding: chunked" in head.lower()
    out = b""
    while True:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            return out
        out, rest = out + rest[:size], rest[size + 2 :]


async def test_a_stream_is_relayed_whole_and_counts_as_a_success(rig: Rig) -> None:
    async def script(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.write(HEAD)
        for i in range(50):
            w.write(chunk(event(i)))
            if i % 7 == 0:
                await w.drain()
                await asyncio.sleep(0.001)  # some chunks in reads of their own
        w.write(chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        await w.drain()

    SCRIPT.append(script)
    body = body_of(await rig.answer())
    assert body == b"".join(event(i) for i in range(50)) + b"data: [DONE]\n\n"
    await asyncio.wait_for(rig.settled.wait(), 2.0)
    assert rig.mailbox.told == [Outcome(True)]
    assert rig.worker.counter.active == 0
    assert rig.bodies[0].sink is not None  # it went through the pipe, not the read loop


async def test_the_last_read_and_the_answers_end_are_one_client_write(rig: Rig) -> None:
    """The worker's last read holds its last pieces and its end: the client gets those pieces
    and the edge's own end in one write (not a write and a 5-byte end after it)."""

    async def script(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.write(HEAD + chunk(event(0)))
        await w.drain()
        await asyncio.sleep(0.05)
        w.write(chunk(event(1)) + chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        await w.drain()

    SCRIPT.append(script)
    body = body_of(await rig.answer())
    assert body == event(0) + event(1) + b"data: [DONE]\n\n"
    writes = rig.client_writes
    assert len(writes) == 2, writes  # the head with the first piece; the rest with the end
    assert writes[1] == chunk(event(1) + b"data: [DONE]\n\n") + b"0\r\n\r\n"
    await asyncio.wait_for(rig.settled.wait(), 2.0)
    assert rig.mailbox.told == [Outcome(True)]


async def test_a_worker_dying_mid_stream_ends_it_with_an_error_event_told_once(rig: Rig) -> None:
    async def script(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.write(HEAD + chunk(event(0)) + chunk(event(1)) + b"40\r\ndata: {")  # cut mid-chunk
        await w.drain()
        w.transport.abort()

    SCRIPT.append(script)
    body = body_of(await rig.answer())
    first, _, rest = body.partition(event(1))
    assert first == event(0)
    assert b'"code":"upstream_stream_error"' in rest.replace(b" ", b""), rest
    assert rest.endswith(b"data: [DONE]\n\n"), rest
    await asyncio.wait_for(rig.settled.wait(), 2.0)
    await asyncio.sleep(0.05)
    assert rig.mailbox.told == [Outcome(False)]  # the breaker hears of it once
    assert rig.worker.counter.active == 0


async def test_a_silent_worker_is_cut_at_the_idle_limit(rig: Rig) -> None:
    async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.write(HEAD + chunk(event(0)))
        await w.drain()
        await r.read()  # silent until the gateway hangs up

    SCRIPT.append(script)
    reader, writer = await rig.connect()
    got = await asyncio.wait_for(reader.readuntil(event(0)), 5.0)
    assert got.startswith(b"HTTP/1.1 200")
    for _ in range(TICKS + 1):  # the sweeper's ticks, driven by hand
        rig.sweeper.tick()
    rest = await asyncio.wait_for(reader.read(), 5.0)
    writer.close()
    assert b"no data for 0.4 s" in rest, rest
    await asyncio.wait_for(rig.upstream_gone.wait(), 2.0)  # the upstream was dropped
    assert rig.mailbox.told == [Outcome(False)]


async def test_a_client_leaving_drops_the_upstream_and_blames_nobody(rig: Rig) -> None:
    async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.write(HEAD + chunk(event(0)))
        await w.drain()
        for i in range(1, 1000):  # a slow stream, until the gateway hangs up
            await asyncio.sleep(0.01)
            w.write(chunk(event(i)))
            await w.drain()

    SCRIPT.append(script)
    reader, writer = await rig.connect()
    await asyncio.wait_for(reader.readuntil(event(0)), 5.0)
    writer.transport.abort()  # the client hangs up mid-stream
    await asyncio.wait_for(rig.upstream_gone.wait(), 2.0)  # the worker sees the disconnect
    await asyncio.wait_for(rig.settled.wait(), 2.0)
    assert rig.mailbox.told == []  # nothing said about the worker
    assert rig.worker.counter.active == 0


async def test_a_client_that_stops_reading_holds_the_worker_back(rig: Rig) -> None:
    sent = [0]
    total = 64 * 1024 * 1024
    piece = chunk(b"data: " + b"x" * (64 * 1024 - 8) + b"\n\n")

    async def script(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.transport.set_write_buffer_limits(high=64 * 1024)
        w.write(HEAD)
        while sent[0] < total:
            w.write(piece)
            sent[0] += len(piece)
            await w.drain()
        w.write(b"0\r\n\r\n")
        await w.drain()

    SCRIPT.append(script)
    reader, writer = await slow_client(rig.edge.port, REQUEST)
    # The client reads nothing more: the worker must stall well short of the stream's 64 MiB
    # (socket buffers on both hops, the edge's high-water mark and one upstream read).
    await until_still(lambda: sent[0])
    assert sent[0] < 16 * 1024 * 1024, sent[0]
    # Reading again lets the whole stream through, in order, and it ends well.
    received = 0
    while data := await asyncio.wait_for(reader.read(1024 * 1024), 10.0):
        received += len(data)
        if data.endswith(b"0\r\n\r\n") and sent[0] >= total:
            break
    writer.close()
    assert sent[0] >= total
    assert received > total
    await asyncio.wait_for(rig.settled.wait(), 5.0)
    assert rig.mailbox.told == [Outcome(True)]


async def test_a_stream_ending_while_its_client_is_slow_leaves_a_reusable_connection(
    rig: Rig,
) -> None:
    big = b"data: " + b"y" * (4 * 1024 * 1024) + b"\n\n"

    async def first(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.write(HEAD + chunk(big) + b"0\r\n\r\n")  # the end in the read that pauses it
        await w.drain()

    async def second(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.write(HEAD + chunk(event(7)) + b"0\r\n\r\n")
        await w.drain()

    SCRIPT.extend([first, second])
    reader, writer = await rig.connect()
    await asyncio.sleep(0.3)  # not reading: the client's transport pauses
    data = await asyncio.wait_for(reader.read(), 5.0)
    writer.close()
    assert body_of(data) == big
    assert body_of(await rig.answer()) == event(7)  # the kept connection reads again
    assert rig.connections == 1
    assert rig.mailbox.told == [Outcome(True), Outcome(True)]


class Conn:
    """What a body asks of its connection, recorded."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def pause(self) -> None:
        self.calls.append("pause")

    def resume(self) -> None:
        self.calls.append("resume")


class SlowClient:
    """A client writer whose transport is paused after every write until `wait_writable`."""

    def __init__(self) -> None:
        self.got: list[bytes] = []
        self.drained = asyncio.Event()

    def write_nowait(self, data: bytes) -> bool:
        self.got.append(data)
        return False

    async def wait_writable(self) -> None:
        await self.drained.wait()


async def test_a_pipe_that_ends_paused_resumes_its_connection() -> None:
    conn, out = Conn(), SlowClient()
    body = Body(conn)
    watch = Watch(lambda: None)
    pipe = Pipe(body, out, watch)
    task = asyncio.create_task(pipe.run())
    await asyncio.sleep(0)
    body.feed(b"a")  # pauses the source ...
    body.feed_eof()  # ... and the answer ends in the same read
    assert await asyncio.wait_for(task, 1.0) is None
    assert out.got == [b"a"]
    assert conn.calls == ["pause", "resume"]  # the connection can carry the next request
    assert not watch.busy and watch.progress == 1


async def test_a_paused_pipe_resumes_on_drain_and_counts_the_wait_as_busy() -> None:
    conn, out = Conn(), SlowClient()
    body = Body(conn)
    body.feed(b"early")  # buffered before the pipe: it goes first
    watch = Watch(lambda: None)
    task = asyncio.create_task(Pipe(body, out, watch).run())
    await asyncio.sleep(0.01)
    assert out.got == [b"early"] and conn.calls == ["pause"] and watch.busy
    out.drained.set()
    await asyncio.sleep(0.01)
    assert conn.calls == ["pause", "resume"] and not watch.busy
    body.set_exception(TimeoutError("deadline"))
    failure = await asyncio.wait_for(task, 1.0)
    assert isinstance(failure, TimeoutError)


async def test_a_body_that_ended_before_its_pipe_leaves_its_bytes_as_the_tail() -> None:
    """What waited unread when the pipe started, with the end behind it, is not written: the
    caller writes it with the answer's end (relay_body returns it)."""
    conn, out = Conn(), SlowClient()
    body = Body(conn)
    body.feed(b"a")
    body.feed(b"b")
    body.feed_eof()
    pipe = Pipe(body, out, Watch(lambda: None))
    assert await asyncio.wait_for(pipe.run(), 1.0) is None
    assert out.got == [] and pipe.tail == b"ab"
