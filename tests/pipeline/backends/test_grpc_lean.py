"""The lean gRPC data path's asyncio shell (`grpc_lean.LeanChannel`) against scripted raw HTTP/2
servers on loopback: batching, status mapping, deadlines, keepalive, GOAWAY, lost connections,
and TLS (grpcs://: a reconnect keeps TLS, ALPN h2 is required, certificates are checked).
The behaviour against real grpc.aio servers is in test_grpc.py (which runs Generate on
this path) and here for the grpc.aio fallback."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from ssl import SSLContext, SSLError
from typing import Any

import pytest
from support.h2_peer import Peer
from support.tls_certs import make_pki

from smg.pipeline.backends import hpack
from smg.pipeline.backends.grpc_errors import CallError, grpc_timeout
from smg.pipeline.backends.grpc_lean import _TIMEOUT_FIELD, LeanChannel
from smg.pipeline.backends.h2_frames import (
    DATA,
    FLAG_ACK,
    GOAWAY_FRAME,
    PING,
    RST_STREAM,
    SETTINGS,
    SETTINGS_INITIAL_WINDOW_SIZE,
    SETTINGS_MAX_CONCURRENT_STREAMS,
    WINDOW_UPDATE,
    frame,
)
from smg.tls import HTTP1

PATH = "/vllm.grpc.engine.VllmEngine/Generate"


Script = Callable[[Peer], Awaitable[None]]


@pytest.fixture
async def serve() -> AsyncIterator[Callable[..., Awaitable[str]]]:
    """Start a scripted server (over TLS with `ssl`); its `host:port`."""
    servers: list[asyncio.Server] = []
    peers: list[asyncio.Task[None]] = []

    async def start(script: Script, ssl: SSLContext | None = None) -> str:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                await script(Peer(reader, writer))
            except (asyncio.IncompleteReadError, ConnectionError, SSLError):
                pass
            finally:
                writer.close()

        def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            peers.append(asyncio.ensure_future(handle(reader, writer)))

        server = await asyncio.start_server(on_connect, "127.0.0.1", 0, ssl=ssl)
        servers.append(server)
        return f"127.0.0.1:{server.sockets[0].getsockname()[1]}"

    yield start
    for task in peers:
        task.cancel()
    for server in servers:
        server.close()


async def read_all(call: Any) -> list[bytes]:
    out: list[bytes] = []
    while batch := await call.read_batch():
        out += batch
    return out


async def test_messages_that_arrive_together_are_one_batch(serve: Any) -> None:
    async def script(peer: Peer) -> None:
        sid = await peer.start()
        headers = dict(peer.request_headers)
        assert headers[":path"] == PATH and headers["te"] == "trailers"
        assert headers["content-type"] == "application/grpc"
        peer.send(peer.headers(sid, [(":status", "200")]) + peer.messages(sid, b"a", b"b", b"c"))
        await asyncio.sleep(0.05)
        peer.send(peer.messages(sid, b"d") + peer.ok(sid))
        await peer.frame_of(GOAWAY_FRAME)  # until the client closes

    ch = LeanChannel(await serve(script))
    call = await ch.start(PATH, b"req", timeout_s=5)
    assert await call.read_batch() == [b"a", b"b", b"c"]
    assert await call.read_batch() == [b"d"]
    assert await call.read_batch() == []
    assert call.done()
    await ch.close()


@pytest.mark.parametrize(
    ("trailers", "code", "details"),
    [
        ([(":status", "200"), ("grpc-status", "3"), ("grpc-message", "bad%20prompt")],
         "INVALID_ARGUMENT", "bad prompt"),
        ([(":status", "503")], "UNAVAILABLE", "HTTP status 503"),
        ([(":status", "200")], "INTERNAL", "without a grpc-status"),
    ],
)  # fmt: skip
async def test_statuses(serve: Any, trailers: Any, code: str, details: str) -> None:
    async def script(peer: Peer) -> None:
        sid = await peer.start()
        peer.send(peer.headers(sid, trailers, end=True))
        await peer.frame_of(GOAWAY_FRAME)

    ch = LeanChannel(await serve(script))
    call = await ch.start(PATH, b"req")
    with pytest.raises(CallError) as info:
        await read_all(call)
    assert info.value.code == code and details in info.value.details
    await ch.close()


async def test_deadline_resets_the_stream(serve: Any) -> None:
    reset = asyncio.Event()
    timeout_header: list[str] = []

    async def script(peer: Peer) -> None:
        sid = await peer.start()
        timeout_header.extend(v for k, v in peer.request_headers if k == "grpc-timeout")
        _, _, rst_sid, payload = await peer.frame_of(RST_STREAM)
        assert rst_sid == sid and int.from_bytes(payload, "big") == 8  # CANCEL
        reset.set()
        await peer.frame_of(GOAWAY_FRAME)

    ch = LeanChannel(await serve(script))
    call = await ch.start(PATH, b"req", timeout_s=0.2)
    with pytest.raises(CallError) as info:
        await read_all(call)
    assert info.value.code == "DEADLINE_EXCEEDED"
    await asyncio.wait_for(reset.wait(), 5)
    [sent] = timeout_header
    assert sent.endswith("m") and 150 <= int(sent[:-1]) <= 200, sent
    await ch.close()


async def test_detached_call_is_not_reset(serve: Any) -> None:
    seen: list[int] = []
    done = asyncio.Event()

    async def script(peer: Peer) -> None:
        sid = await peer.start()
        peer.send(peer.headers(sid, [(":status", "200")]) + peer.messages(sid, b"last"))
        await asyncio.sleep(0.1)
        peer.send(peer.ok(sid))
        await peer.frame_of(GOAWAY_FRAME)
        seen.extend(f[0] for f in peer.frames)
        done.set()

    ch = LeanChannel(await serve(script))
    call = await ch.start(PATH, b"req", timeout_s=5)
    assert await call.read_batch() == [b"last"]
    call.detach()
    await asyncio.sleep(0.3)
    assert call.done()
    await ch.close()
    await asyncio.wait_for(done.wait(), 5)
    assert RST_STREAM not in seen


async def test_unanswered_keepalive_fails_the_call(serve: Any) -> None:
    async def script(peer: Peer) -> None:
        await peer.start()
        await asyncio.sleep(10)  # alive at TCP level, silent at HTTP/2 level

    ch = LeanChannel(await serve(script), keepalive_time_s=0.1, keepalive_timeout_s=0.1)
    call = await ch.start(PATH, b"req")
    with pytest.raises(CallError) as info:
        await asyncio.wait_for(read_all(call), 5)
    assert info.value.code == "UNAVAILABLE" and "keepalive" in info.value.details
    await ch.close()


async def test_answered_keepalive_keeps_the_call(serve: Any) -> None:
    async def script(peer: Peer) -> None:
        sid = await peer.start()
        _, _, _, payload = await peer.frame_of(PING)
        peer.send(frame(PING, FLAG_ACK, 0, payload))
        await asyncio.sleep(0.3)
        peer.send(peer.headers(sid, [(":status", "200")]) + peer.messages(sid, b"x"))
        peer.send(peer.ok(sid))
        await peer.frame_of(GOAWAY_FRAME)

    ch = LeanChannel(await serve(script), keepalive_time_s=0.1, keepalive_timeout_s=0.2)
    call = await ch.start(PATH, b"req")
    assert await asyncio.wait_for(read_all(call), 5) == [b"x"]
    await ch.close()


@pytest.mark.parametrize("tls", [False, True], ids=["grpc", "grpcs"])
async def test_goaway_refuses_unprocessed_calls_and_a_new_connection_follows(
    serve: Any, tmp_path: Path, tls: bool
) -> None:
    """... and the new connection is made the way the first was: over TLS for grpcs://."""
    seen: list[tuple[str | None, str]] = []  # per connection: (ALPN if TLS, :scheme)

    async def script(peer: Peer) -> None:
        sid = await peer.start()
        ssl_object = peer.writer.get_extra_info("ssl_object")
        alpn = ssl_object.selected_alpn_protocol() if ssl_object is not None else None
        seen.append((alpn, dict(peer.request_headers)[":scheme"]))
        if len(seen) == 1:
            peer.send(frame(GOAWAY_FRAME, 0, 0, bytes(4) + (0).to_bytes(4, "big") + b"restart"))
            await asyncio.sleep(0.2)
            return
        peer.send(peer.headers(sid, [(":status", "200")]) + peer.messages(sid, b"ok"))
        peer.send(peer.ok(sid))
        await peer.frame_of(GOAWAY_FRAME)

    if tls:
        pki = make_pki(tmp_path)
        ch = LeanChannel(await serve(script, pki.h2_server()), ssl_context=pki.worker_tls().h2)
    else:
        ch = LeanChannel(await serve(script))
    call = await ch.start(PATH, b"req")
    with pytest.raises(CallError) as info:
        await read_all(call)
    assert info.value.code == "UNAVAILABLE" and "restart" in info.value.details
    again = await ch.start(PATH, b"req")
    assert await read_all(again) == [b"ok"]
    expected = ("h2", "https") if tls else (None, "http")
    assert seen == [expected, expected]
    await ch.close()


async def test_settings_that_leave_no_room_retire_an_idle_connection(serve: Any) -> None:
    """No event says so (the ACK's flush looks): the connection closes, a new one follows."""
    closed = asyncio.Event()
    conns = 0

    async def script(peer: Peer) -> None:
        nonlocal conns
        conns += 1
        sid = await peer.start()
        peer.send(
            peer.headers(sid, [(":status", "200")]) + peer.messages(sid, b"ok") + peer.ok(sid)
        )
        if conns > 1:
            await peer.frame_of(GOAWAY_FRAME)
            return
        await asyncio.sleep(0.05)
        limit = SETTINGS_MAX_CONCURRENT_STREAMS.to_bytes(2, "big") + (0).to_bytes(4, "big")
        peer.send(frame(SETTINGS, 0, 0, limit))
        try:
            while await peer.reader.read(65536):  # until the client closes
                pass
        finally:
            closed.set()

    ch = LeanChannel(await serve(script))
    assert await read_all(await ch.start(PATH, b"req")) == [b"ok"]
    await asyncio.wait_for(closed.wait(), 2)
    assert await read_all(await ch.start(PATH, b"req")) == [b"ok"]
    assert conns == 2
    await ch.close()


async def test_a_tls_server_without_h2_is_refused(serve: Any, tmp_path: Path) -> None:
    pki = make_pki(tmp_path)

    async def script(peer: Peer) -> None:
        await peer.reader.read(1)  # says nothing: an HTTP/1.1 server waiting for a request

    ch = LeanChannel(await serve(script, pki.h2_server(HTTP1)), ssl_context=pki.worker_tls().h2)
    with pytest.raises(CallError) as info:
        await ch.start(PATH, b"req")
    assert info.value.code == "UNAVAILABLE"
    assert "did not select HTTP/2" in info.value.details and "ALPN none" in info.value.details
    await ch.close()


async def test_certificate_problems_fail_the_connect(serve: Any, tmp_path: Path) -> None:
    pki = make_pki(tmp_path)

    async def script(peer: Peer) -> None:
        await peer.start()

    target = await serve(script, pki.h2_server())
    ch = LeanChannel(target, ssl_context=pki.worker_tls(ca=pki.other_ca_path).h2)
    with pytest.raises(CallError) as info:
        await ch.start(PATH, b"req")
    assert info.value.code == "UNAVAILABLE" and "CERTIFICATE_VERIFY_FAILED" in info.value.details
    await ch.close()


@pytest.mark.parametrize("how", ["drop", "garbage"])
async def test_broken_connection_fails_the_call_after_its_messages(serve: Any, how: str) -> None:
    async def script(peer: Peer) -> None:
        sid = await peer.start()
        peer.send(peer.headers(sid, [(":status", "200")]) + peer.messages(sid, b"m"))
        if how == "garbage":
            peer.send(b"\xff" * 64)
        await peer.writer.drain()

    ch = LeanChannel(await serve(script))
    call = await ch.start(PATH, b"req")
    assert await call.read_batch() == [b"m"]
    with pytest.raises(CallError) as info:
        await read_all(call)
    assert info.value.code == ("UNAVAILABLE" if how == "drop" else "INTERNAL")
    await ch.close()


@pytest.mark.parametrize("big", [0, 200_000], ids=["small", "bigger-than-the-window"])
async def test_a_stalled_reader_holds_the_engine_at_the_window(serve: Any, big: int) -> None:
    """The server sends as fast as flow control lets it. While the caller does not read, it is
    blocked with at most one window in flight; once reading resumes, everything arrives."""
    window = 64 * 1024
    body = [i.to_bytes(4, "big") * 250 for i in range(300)]  # 300 x 1000 bytes
    body[150] = b"B" * big or body[150]  # a message the window cannot hold, mid-stream
    total = sum(len(m) + 5 for m in body)
    sent = 0
    blocked = asyncio.Event()

    async def script(peer: Peer) -> None:
        nonlocal sent
        sid = await peer.start()
        settings = next(f[3] for f in peer.frames if f[0] == SETTINGS and not f[1] & FLAG_ACK)
        pairs = {int.from_bytes(settings[i : i + 2], "big"): settings[i + 2 : i + 6]
                 for i in range(0, len(settings), 6)}  # fmt: skip
        stream_window = int.from_bytes(pairs[SETTINGS_INITIAL_WINDOW_SIZE], "big")
        conn_window = 65_535 + sum(
            int.from_bytes(f[3], "big") for f in peer.frames if f[0] == WINDOW_UPDATE
        )
        credit = asyncio.Event()

        async def take_credit() -> None:
            nonlocal stream_window, conn_window
            while True:
                kind, _, fsid, payload = await peer.next_frame()
                if kind == WINDOW_UPDATE:
                    if fsid == sid:
                        stream_window += int.from_bytes(payload, "big")
                    elif fsid == 0:
                        conn_window += int.from_bytes(payload, "big")
                    credit.set()
                elif kind == GOAWAY_FRAME:
                    return

        async with asyncio.TaskGroup() as tg:
            tg.create_task(take_credit())
            peer.send(peer.headers(sid, [(":status", "200")]))
            data = b"".join(b"\x00" + len(m).to_bytes(4, "big") + m for m in body)
            while sent < len(data):
                n = min(len(data) - sent, stream_window, conn_window, 16_384)
                if n <= 0:
                    blocked.set()
                    credit.clear()
                    await credit.wait()
                    blocked.clear()
                    continue
                peer.send(frame(DATA, 0, sid, data[sent : sent + n]))
                sent += n
                stream_window -= n
                conn_window -= n
                await peer.writer.drain()
            peer.send(peer.ok(sid))

    ch = LeanChannel(await serve(script), stream_window_bytes=window)
    call = await ch.start(PATH, b"req", timeout_s=20)

    async def stalled() -> None:  # until the server made no progress for 0.2 s
        last = -1
        while sent != last:
            last = sent
            await asyncio.sleep(0.2)

    read = await call.read_batch()
    for _ in range(2):  # stall twice: at the start, and again after reading past the big one
        taken = sum(len(m) + 5 for m in read)
        await asyncio.wait_for(stalled(), 5)
        assert blocked.is_set() and sent < total  # the engine waits for credit ...
        assert sent - taken <= window  # ... with one window in flight or buffered
        assert sum(len(m) + 5 for m in call._messages) <= window
        while len(read) < 160:
            read += await asyncio.wait_for(call.read_batch(), 5)
    read += await asyncio.wait_for(read_all(call), 10)
    assert read == body and sent == total
    await ch.close()


async def test_connection_refused_is_unavailable() -> None:
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    ch = LeanChannel(f"127.0.0.1:{port}")
    with pytest.raises(CallError) as info:
        await ch.start(PATH, b"req")
    assert info.value.code == "UNAVAILABLE"
    await ch.close()


@pytest.mark.parametrize("timeout_s", [0.0, 0.0004, 1.5, 1799.9996, 99_999.0, 10**9])
def test_the_timeout_field_is_what_hpack_encode_writes(timeout_s: float) -> None:
    value = grpc_timeout(timeout_s)
    field = _TIMEOUT_FIELD + len(value.encode()).to_bytes(1, "big") + value.encode()
    assert field == hpack.encode((("grpc-timeout", value),))
    assert hpack.Decoder().decode(field) == [("grpc-timeout", value)]
