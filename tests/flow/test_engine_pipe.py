"""A streamed engine answer's callback pipe (smg/flow/engine_pipe.py) over real loopback sockets:
a scripted HTTP/2 gRPC engine speaking vLLM's messages, the lean gRPC channel, `start_stream`,
`render.stream` with the OpenAI chat renderer, and the lean edge serving the client. What must
hold: the text as the engine sent it, whatever the reads; back-pressure from a client that stops
reading to the engine (held at the stream's flow-control window, nothing piling up in the
gateway); an engine that dies mid-stream or goes silent (an error event, then the end; the
outcome a failure, told once); a client that leaves (the engine's stream reset and an Abort
sent, nothing reported about the engine); a stream that ends while its client is slow."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
from support.h2_peer import Peer
from support.write_stall import slow_client, until_still

from smg.api.edge_answers import EdgeClient
from smg.core.idle import TICKS, IdleSweeper
from smg.edge.exchange import EdgeRequest, EdgeResponse, Reply
from smg.edge.server import EdgeServer
from smg.flow import render
from smg.pipeline.backends.grpc_contract import PROTO_MODULES
from smg.pipeline.backends.grpc_generate import EventBatches, GenerateCalls
from smg.pipeline.backends.grpc_lean import LeanChannel
from smg.pipeline.backends.grpc_lean_stream import LeanStream
from smg.pipeline.backends.grpc_pool import EngineStream, start_stream
from smg.pipeline.backends.h2_frames import (
    DATA,
    FLAG_ACK,
    GOAWAY_FRAME,
    RST_STREAM,
    SETTINGS,
    SETTINGS_INITIAL_WINDOW_SIZE,
    WINDOW_UPDATE,
    frame,
)
from smg.pipeline.engine_types import EngineRequest
from smg.pipeline.output import OutputShaper, OutputSpec
from smg.pipeline.sampling import SamplingParams

pytestmark = pytest.mark.unit

PB = PROTO_MODULES["vllm"]
REQUEST = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Content-Length: 2\r\nConnection: close\r\n\r\n{}"
)
WINDOW = 64 * 1024  # the lean channel's stream window here


def chunk(text: str) -> bytes:
    """A vLLM chunk whose token ids are the text's code points (the test's tokenizer)."""
    ids = [ord(c) for c in text]
    body = PB.GenerateStreamChunk(
        token_ids=ids, prompt_tokens=3, completion_tokens=len(ids), index=0
    )
    return bytes(PB.GenerateResponse(chunk=body).SerializeToString())


def complete(last: str) -> bytes:
    """vLLM's streaming Complete: it repeats the last chunk's ids (dropped by the gateway)."""
    ids = [ord(c) for c in last]
    body = PB.GenerateComplete(
        output_ids=ids,
        finish_reason="stop",
        prompt_tokens=3,
        completion_tokens=len(ids),
        index=0,
    )
    return bytes(PB.GenerateResponse(complete=body).SerializeToString())


def framed(*messages: bytes) -> bytes:
    return b"".join(b"\x00" + len(m).to_bytes(4, "big") + m for m in messages)


def decode(ids: Any, skip_special_tokens: bool = True) -> str:
    return "".join(chr(i) for i in ids)


Script = Callable[[Peer, int], Awaitable[None]]


class Engine:
    """`start_stream`'s view of an engine client: the lean Generate calls."""

    def __init__(self, calls: GenerateCalls) -> None:
        self.calls = calls
        self.url = calls.url

    def generate_batches(self, req: EngineRequest, *, timeout_s: float | None) -> EventBatches:
        return self.calls.batches(req, timeout_s)


@dataclass
class Rig:
    edge: EdgeServer
    sweeper: IdleSweeper
    aborts: list[str]
    outcomes: list[bool | None] = field(default_factory=list)
    streams: list[EngineStream] = field(default_factory=list)
    settled: asyncio.Event = field(default_factory=asyncio.Event)
    reset: asyncio.Event = field(default_factory=asyncio.Event)  # the engine saw RST_STREAM

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.edge.port)
        writer.write(REQUEST)
        return reader, writer

    async def answer(self) -> bytes:
        reader, writer = await self.connect()
        data = await asyncio.wait_for(reader.read(), 10.0)  # the edge closes after it
        writer.close()
        return data

    def piped(self) -> bool:
        """The stream went through the pipe (its call handed to the stream's callbacks), not
        the read loop."""
        agen = self.streams[0]._agen
        return isinstance(agen, LeanStream) and agen._call is not None and agen._call._sink is agen


SCRIPT: list[Script] = []


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    peers: list[asyncio.Task[None]] = []
    reset = asyncio.Event()

    async def engine_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = Peer(reader, writer)
        try:
            sid = await peer.start()
            await SCRIPT.pop(0)(peer, sid)
            while True:  # until the gateway resets the stream or hangs up
                kind, _, fsid, _ = await peer.next_frame()
                if kind == RST_STREAM and fsid == sid:
                    reset.set()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peers.append(asyncio.ensure_future(engine_conn(reader, writer)))

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    target = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    channel = LeanChannel(target, stream_window_bytes=WINDOW)
    sweeper = IdleSweeper(0.4)
    aborts: list[str] = []
    engine = Engine(
        GenerateCalls(f"grpc://{target}", "vllm", None, aborts.append, lean=channel, idle=sweeper)
    )

    async def handler(req: EdgeRequest, resp: EdgeResponse) -> Reply | None:
        await req.read()
        request = EngineRequest("engine-rid", (1, 2, 3), SamplingParams(), True, "hi")
        stream = await start_stream(engine, request, 30.0)  # type: ignore[arg-type]
        r.streams.append(stream)
        shaper = OutputShaper(
            OutputSpec(response_id="chatcmpl-1", model="m", created=1, chat=True), decode
        )
        out = render.sse_response(shaper, {"X-Request-Id": "rid-1"})
        client = EdgeClient(req.head, "/v1/chat/completions", resp, None, None)
        try:
            await render.stream(client, out, stream, shaper, "engine-rid", r.outcomes.append)  # type: ignore[arg-type]
        finally:
            r.settled.set()
        return None

    edge = EdgeServer(handler)
    r = Rig(edge, sweeper, aborts, reset=reset)
    await edge.start("127.0.0.1", 0)
    yield r
    await edge.close()
    await channel.close()
    for task in peers:
        task.cancel()
    server.close()
    SCRIPT.clear()


def body_of(answer: bytes) -> bytes:
    """The de-chunked body of one chunked HTTP/1.1 answer."""
    head, _, rest = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    out = b""
    while True:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            return out
        out, rest = out + rest[:size], rest[size + 2 :]


def events(body: bytes) -> list[Any]:
    """The SSE events: each chunk's delta content or finish reason, an error's code, [DONE]."""
    out: list[Any] = []
    for line in body.split(b"\n\n"):
        if line == b"data: [DONE]":
            out.append("[DONE]")
        elif line.startswith(b"data: "):
            doc = orjson.loads(line[6:])
            if "error" in doc:
                out.append(("error", doc["error"]["code"]))
                continue
            choice = doc["choices"][0]
            if choice["finish_reason"] is not None:
                out.append(("finish", choice["finish_reason"]))
            elif choice["delta"].get("content"):
                out.append(choice["delta"]["content"])
    return out


def text_of(evs: list[Any]) -> str:
    return "".join(e for e in evs if isinstance(e, str) and e != "[DONE]")


async def test_a_stream_is_rendered_whole_through_the_pipe(rig: Rig) -> None:
    words = [f"w{i} " for i in range(40)]

    async def script(peer: Peer, sid: int) -> None:
        peer.send(peer.headers(sid, [(":status", "200")]))
        for i, word in enumerate(words):
            peer.send(peer.messages(sid, chunk(word)))
            if i % 5 == 0:  # some in reads of their own, some together
                await peer.writer.drain()
                await asyncio.sleep(0.002)
        peer.send(peer.messages(sid, complete(words[-1])) + peer.ok(sid))
        await peer.writer.drain()

    SCRIPT.append(script)
    evs = events(body_of(await rig.answer()))
    assert text_of(evs) == "".join(words)
    assert evs[-2:] == [("finish", "stop"), "[DONE]"]
    await asyncio.wait_for(rig.settled.wait(), 2.0)
    assert rig.outcomes == [True]
    assert rig.piped()  # it went through the pipe, not the read loop
    assert rig.aborts == []  # the engine ended it: no Abort


async def test_an_engine_dying_mid_stream_ends_it_with_an_error_told_once(rig: Rig) -> None:
    async def script(peer: Peer, sid: int) -> None:
        peer.send(peer.headers(sid, [(":status", "200")]) + peer.messages(sid, chunk("ab")))
        await peer.writer.drain()
        await asyncio.sleep(0.05)
        peer.send(peer.messages(sid, chunk("cd")))
        await peer.writer.drain()
        await asyncio.sleep(0.05)
        peer.writer.transport.abort()

    SCRIPT.append(script)
    evs = events(body_of(await rig.answer()))
    assert text_of(evs) == "abcd"
    assert ("finish", "error") in evs or any(
        isinstance(e, tuple) and e[0] == "error" for e in evs
    ), evs
    assert evs[-1] == "[DONE]"
    await asyncio.wait_for(rig.settled.wait(), 2.0)
    assert rig.outcomes == [False]  # one outcome, a failure
    assert rig.piped()


async def test_a_silent_engine_is_cut_at_the_idle_limit(rig: Rig) -> None:
    async def script(peer: Peer, sid: int) -> None:
        peer.send(peer.headers(sid, [(":status", "200")]) + peer.messages(sid, chunk("hi")))
        await peer.writer.drain()  # then silent

    SCRIPT.append(script)
    reader, writer = await rig.connect()
    got = await asyncio.wait_for(reader.readuntil(b'"hi"'), 5.0)
    assert got.startswith(b"HTTP/1.1 200")
    await asyncio.sleep(0.05)
    for _ in range(TICKS + 1):  # the sweeper's ticks, driven by hand
        rig.sweeper.tick()
    rest = await asyncio.wait_for(reader.read(), 5.0)
    writer.close()
    assert b"[DONE]" in rest and b"error" in rest, rest
    await asyncio.wait_for(rig.reset.wait(), 2.0)  # the engine's stream was reset ...
    assert rig.aborts == ["engine-rid"]  # ... and its request aborted
    await asyncio.wait_for(rig.settled.wait(), 2.0)
    assert rig.outcomes == [False]


async def test_a_client_leaving_resets_the_engine_stream_and_blames_nobody(rig: Rig) -> None:
    async def script(peer: Peer, sid: int) -> None:
        peer.send(peer.headers(sid, [(":status", "200")]) + peer.messages(sid, chunk("go")))
        await peer.writer.drain()
        for _ in range(30):  # a slow stream for a while (then the rig reads the gateway's
            await asyncio.sleep(0.01)  # frames: the reset)
            peer.send(peer.messages(sid, chunk("x")))
            await peer.writer.drain()

    SCRIPT.append(script)
    reader, writer = await rig.connect()
    await asyncio.wait_for(reader.readuntil(b'"go"'), 5.0)
    writer.transport.abort()  # the client hangs up mid-stream
    await asyncio.wait_for(rig.settled.wait(), 2.0)
    await asyncio.wait_for(rig.reset.wait(), 2.0)  # the engine sees the call cancelled
    assert rig.aborts == ["engine-rid"]
    assert rig.outcomes == [None]  # nothing said about the engine


class Credit:
    """The engine's side of HTTP/2 flow control: what it may still send, from the gateway's
    SETTINGS and WINDOW_UPDATEs."""

    def __init__(self, peer: Peer, sid: int) -> None:
        self.peer, self.sid = peer, sid
        settings = next(f[3] for f in peer.frames if f[0] == SETTINGS and not f[1] & FLAG_ACK)
        pairs = {int.from_bytes(settings[i : i + 2], "big"): settings[i + 2 : i + 6]
                 for i in range(0, len(settings), 6)}  # fmt: skip
        self.stream = int.from_bytes(pairs[SETTINGS_INITIAL_WINDOW_SIZE], "big")
        self.conn = 65_535 + sum(
            int.from_bytes(f[3], "big") for f in peer.frames if f[0] == WINDOW_UPDATE
        )
        self.more = asyncio.Event()
        self.blocked = False

    async def take(self) -> None:
        while True:
            kind, _, fsid, payload = await self.peer.next_frame()
            if kind == WINDOW_UPDATE:
                if fsid == self.sid:
                    self.stream += int.from_bytes(payload, "big")
                elif fsid == 0:
                    self.conn += int.from_bytes(payload, "big")
                self.more.set()
            elif kind == GOAWAY_FRAME:
                return

    async def send(self, data: bytes) -> None:
        """`data` as DATA frames, each within the windows (waiting for credit)."""
        sent = 0
        while sent < len(data):
            n = min(len(data) - sent, self.stream, self.conn, 16_384)
            if n <= 0:
                self.blocked = True
                self.more.clear()
                await self.more.wait()
                self.blocked = False
                continue
            self.peer.send(frame(DATA, 0, self.sid, data[sent : sent + n]))
            sent += n
            self.stream -= n
            self.conn -= n
            await self.peer.writer.drain()


async def test_a_client_that_stops_reading_holds_the_engine_at_its_window(rig: Rig) -> None:
    piece = "x" * 2000
    total = 12_000  # messages: ~24 MB of text
    sent = [0]
    credit: list[Credit] = []

    async def script(peer: Peer, sid: int) -> None:
        c = Credit(peer, sid)
        credit.append(c)
        async with asyncio.TaskGroup() as tg:
            taker = tg.create_task(c.take())
            peer.send(peer.headers(sid, [(":status", "200")]))
            message = framed(chunk(piece))
            for _ in range(total):
                await c.send(message)
                sent[0] += 1
            await c.send(framed(complete(piece)))
            peer.send(peer.ok(sid))
            await peer.writer.drain()
            taker.cancel()

    SCRIPT.append(script)
    reader, writer = await slow_client(rig.edge.port, REQUEST)
    # The client reads nothing more: the engine must stall, waiting for credit, well short of
    # the answer (socket buffers, the edge's high-water mark and one stream window).
    await until_still(lambda: sent[0])
    assert credit[0].blocked  # by flow control: the gateway gives no credit while held
    assert sent[0] * len(piece) < 12 * 1024 * 1024, sent[0]
    # Reading again lets the whole answer through, in order, and it ends well.
    data = await asyncio.wait_for(reader.read(), 30.0)
    writer.close()
    evs = events(body_of(b"HTTP/1.1 200 OK\r\n\r\n" + data))
    assert text_of(evs) == piece * total
    assert evs[-2:] == [("finish", "stop"), "[DONE]"]
    await asyncio.wait_for(rig.settled.wait(), 5.0)
    assert rig.outcomes == [True]
    assert rig.piped()


async def test_a_stream_ending_while_its_client_is_slow_still_ends_well(rig: Rig) -> None:
    big = "y" * 4_000_000  # one message: its frames pause the client's transport

    async def script(peer: Peer, sid: int) -> None:
        peer.send(peer.headers(sid, [(":status", "200")]))
        c = Credit(peer, sid)
        async with asyncio.TaskGroup() as tg:
            taker = tg.create_task(c.take())
            await c.send(framed(chunk(big)))
            await asyncio.sleep(0.1)  # the rest and the end arrive while the stream is held
            await c.send(framed(chunk("end"), complete("end")))
            peer.send(peer.ok(sid))
            await peer.writer.drain()
            taker.cancel()

    SCRIPT.append(script)
    reader, writer = await rig.connect()
    await asyncio.sleep(0.3)  # not reading: the client's transport pauses
    data = await asyncio.wait_for(reader.read(), 10.0)
    writer.close()
    evs = events(body_of(data))
    assert text_of(evs) == big + "end"
    assert evs[-2:] == [("finish", "stop"), "[DONE]"]
    await asyncio.wait_for(rig.settled.wait(), 2.0)
    assert rig.outcomes == [True]
    assert rig.aborts == []
