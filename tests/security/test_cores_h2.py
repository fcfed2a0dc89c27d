"""Finding 16: the hand-written HTTP/2 client trusted the engine: unbounded CONTINUATION (64 MB
accepted), unbounded PING/SETTINGS-ACK queues, a send window past 2^31-1, a 256 MiB
receive-window grant.

Each attack comes from a scripted raw HTTP/2 server on loopback against the real `LeanChannel`
(the gateway's gRPC data path). The connection must be torn down cleanly (our GOAWAY with the
RFC 9113 code, or a reset of just the stream at fault) and the call must fail at once with a
clear error, never hang, and never hold what the engine sends beyond the bounds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from pipeline.backends import test_grpc_lean
from pipeline.backends.test_grpc_lean import PATH, Peer, read_all

from smg.pipeline.backends import hpack
from smg.pipeline.backends.grpc_errors import CallError
from smg.pipeline.backends.grpc_lean import LeanCall, LeanChannel, _Connection
from smg.pipeline.backends.h2_frames import (
    CONTINUATION,
    DATA,
    ERROR_CANCEL,
    ERROR_ENHANCE_YOUR_CALM,
    ERROR_FLOW_CONTROL,
    FLAG_END_HEADERS,
    GOAWAY_FRAME,
    HEADERS_FRAME,
    MAX_WINDOW,
    PING,
    RST_STREAM,
    SETTINGS,
    WINDOW_UPDATE,
    frame,
)
from smg.pipeline.backends.h2_send import MAX_OWED_CONTROL_FRAMES

MB = 1 << 20
serve = test_grpc_lean.serve  # the scripted raw HTTP/2 server fixture
Serve = Callable[[Callable[[Peer], Awaitable[None]]], Awaitable[str]]


async def goaway_code(peer: Peer) -> int:
    """Read the client's frames until its GOAWAY; its error code."""
    _, _, _, payload = await asyncio.wait_for(peer.frame_of(GOAWAY_FRAME), 10)
    return int.from_bytes(payload[4:8], "big")


async def fails(call: Any, timeout_s: float = 10) -> CallError:
    with pytest.raises(CallError) as info:
        await asyncio.wait_for(read_all(call), timeout_s)
    return info.value


async def torn_down(serve: Serve, script: Any, codes: list[int], code: int, why: str) -> None:
    """A call against `script` fails at once as INTERNAL saying `why`, and the script saw our
    GOAWAY carry `code` (the script appends it to `codes`)."""
    ch = LeanChannel(await serve(script))
    err = await fails(await ch.start(PATH, b"req", timeout_s=30))
    assert err.code == "INTERNAL" and why in err.details
    await asyncio.sleep(0.1)
    assert codes == [code]
    await ch.close()


async def test_continuation_flood_closes_the_connection(serve: Serve) -> None:
    sent = 0
    codes: list[int] = []

    async def script(peer: Peer) -> None:
        nonlocal sent
        sid = await peer.start()
        peer.send(frame(HEADERS_FRAME, 0, sid, hpack.encode([(":status", "200")])))
        goaway = asyncio.ensure_future(goaway_code(peer))
        chunk = frame(CONTINUATION, 0, sid, b"\x00" * 16_384) * 16
        try:
            while sent < 64 * MB and not goaway.done():  # the finding's 64 MB
                peer.send(chunk)
                sent += len(chunk)
                await peer.writer.drain()
        except ConnectionError:
            pass
        codes.append(await goaway)

    await torn_down(serve, script, codes, ERROR_ENHANCE_YOUR_CALM, "header block")
    assert sent < 8 * MB  # cut off early: 64 KiB was the most it could make us hold


async def test_hpack_bomb_closes_the_connection(serve: Serve) -> None:
    codes: list[int] = []

    async def script(peer: Peer) -> None:
        sid = await peer.start()
        name, value = b"x-big", b"v" * 4_000
        block = b"\x40" + hpack.encode_int(len(name), 7) + name
        block += hpack.encode_int(len(value), 7) + value + bytes([0x80 | 62]) * 10_000
        peer.send(frame(HEADERS_FRAME, FLAG_END_HEADERS, sid, block))  # 14 KB -> 40 MB decoded
        codes.append(await goaway_code(peer))

    await torn_down(serve, script, codes, ERROR_ENHANCE_YOUR_CALM, "header list")


@pytest.mark.parametrize("kind", ["ping", "settings"])
async def test_control_frame_flood_closes_the_connection(serve: Serve, kind: str) -> None:
    """The engine floods PINGs (or SETTINGS), each asking for an ACK: past the bound on frames
    owed to it, the connection is closed with ENHANCE_YOUR_CALM."""
    codes: list[int] = []

    async def script(peer: Peer) -> None:
        sid = await peer.start()
        peer.send(peer.headers(sid, [(":status", "200")]))
        one = frame(PING, 0, 0, b"8 bytes!") if kind == "ping" else frame(SETTINGS, 0, 0)
        peer.send(one * 20_000)
        codes.append(await goaway_code(peer))

    await torn_down(serve, script, codes, ERROR_ENHANCE_YOUR_CALM, "without reading")


class StuckTransport(asyncio.Transport):
    """A transport whose peer never reads: everything written stays here."""

    def __init__(self) -> None:
        super().__init__()
        self.written: list[bytes] = []
        self.aborted = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written.append(bytes(data))

    def is_closing(self) -> bool:
        return self.aborted

    def abort(self) -> None:
        self.aborted = True

    def close(self) -> None:
        self.aborted = True


async def test_acks_owed_to_a_peer_that_never_reads_are_bounded() -> None:
    """PINGs a few at a time (each read well under the bound), from a peer that reads nothing:
    once the transport's buffer is full (asyncio calls `pause_writing`), the ACKs wait in the
    sans-IO core, which counts them; past the bound the connection is closed, where before they
    piled up in the transport's buffer for as long as the engine kept sending."""
    ch = LeanChannel("127.0.0.1:1", keepalive_time_s=3600)
    conn = _Connection(ch)
    transport = StuckTransport()
    conn.connection_made(transport)
    call = LeanCall()
    conn.open_call(hpack.encode([(":path", PATH)]), b"req", call)
    conn.pause_writing()  # the socket's buffers are full: the engine is not reading
    before = len(transport.written)
    pings = frame(PING, 0, 0, b"8 bytes!") * 10
    for _ in range(1_000):  # up to 10,000 PINGs
        conn.data_received(pings)
        if transport.aborted:
            break
    assert transport.aborted and call.done()
    with pytest.raises(CallError) as info:
        await call.read_batch()
    assert "without reading" in info.value.details
    # nothing was written while paused but, at the end, the GOAWAY that says why
    late = b"".join(transport.written[before:])
    assert late.endswith(frame(GOAWAY_FRAME, 0, 0, bytes(4) + ERROR_ENHANCE_YOUR_CALM.to_bytes(4)))
    assert len(late) < (MAX_OWED_CONTROL_FRAMES + 8) * 17


async def test_connection_window_past_2_31_is_a_flow_control_error(serve: Serve) -> None:
    codes: list[int] = []

    async def script(peer: Peer) -> None:
        await peer.start()
        peer.send(frame(WINDOW_UPDATE, 0, 0, MAX_WINDOW.to_bytes(4, "big")))
        codes.append(await goaway_code(peer))

    await torn_down(serve, script, codes, ERROR_FLOW_CONTROL, "2^31-1")


async def test_stream_window_past_2_31_resets_that_stream_only(serve: Serve) -> None:
    resets: list[tuple[int, int]] = []

    async def script(peer: Peer) -> None:
        first = await peer.start()
        peer.send(frame(WINDOW_UPDATE, 0, first, MAX_WINDOW.to_bytes(4, "big")))
        _, _, sid, payload = await asyncio.wait_for(peer.frame_of(RST_STREAM), 10)
        resets.append((sid, int.from_bytes(payload, "big")))
        second = (await peer.frame_of(HEADERS_FRAME))[2]  # the next call, same connection
        peer.send(peer.headers(second, [(":status", "200")]) + peer.messages(second, b"fine"))
        peer.send(peer.ok(second))
        await peer.frame_of(GOAWAY_FRAME)

    ch = LeanChannel(await serve(script))
    err = await fails(await ch.start(PATH, b"req", timeout_s=30))
    assert err.code == "INTERNAL" and "2^31-1" in err.details
    assert await asyncio.wait_for(read_all(await ch.start(PATH, b"req")), 10) == [b"fine"]
    assert resets == [(1, ERROR_FLOW_CONTROL)]
    await ch.close()


async def test_a_huge_message_gets_no_huge_window(serve: Serve) -> None:
    """A message header announcing 256 MiB used to get a 256 MiB WINDOW_UPDATE; now the stream
    is reset and the call fails as RESOURCE_EXHAUSTED, with no grant past the budget."""
    granted: list[int] = []
    resets: list[int] = []

    async def script(peer: Peer) -> None:
        sid = await peer.start()
        head = b"\x00" + (256 * MB).to_bytes(4, "big")
        peer.send(peer.headers(sid, [(":status", "200")]) + frame(DATA, 0, sid, head))
        while True:
            kind, _, fsid, payload = await peer.next_frame()
            if kind == WINDOW_UPDATE and fsid == sid:
                granted.append(int.from_bytes(payload, "big"))
            elif kind == RST_STREAM:
                resets.append(int.from_bytes(payload, "big"))
            elif kind == GOAWAY_FRAME:
                return

    ch = LeanChannel(await serve(script))
    err = await fails(await ch.start(PATH, b"req", timeout_s=30))
    assert err.code == "RESOURCE_EXHAUSTED" and "limit" in err.details
    await ch.close()
    await asyncio.sleep(0.2)
    assert resets == [ERROR_CANCEL]
    assert sum(granted) <= ch.max_overdraft_bytes


async def test_a_big_message_within_the_budget_still_arrives(serve: Serve) -> None:
    """The success path: a 20 MB message (bigger than the 256 KiB stream window) is admitted
    through the overdraft, whole."""
    big = b"B" * (20 * MB)

    async def script(peer: Peer) -> None:
        sid = await peer.start()
        data = b"\x00" + len(big).to_bytes(4, "big") + big
        peer.send(peer.headers(sid, [(":status", "200")]))
        settings = next(f[3] for f in peer.frames if f[0] == SETTINGS and not f[1])
        entries = {settings[i + 1]: int.from_bytes(settings[i + 2 : i + 6], "big")
                   for i in range(0, len(settings), 6)}  # fmt: skip
        window, sent = entries[4], 0  # SETTINGS_INITIAL_WINDOW_SIZE
        conn_window = 65_535 + sum(
            int.from_bytes(f[3], "big") for f in peer.frames if f[0] == WINDOW_UPDATE
        )
        while sent < len(data):
            n = min(16_384, len(data) - sent, window, conn_window)
            if n <= 0:
                kind, _, fsid, payload = await peer.next_frame()
                if kind == WINDOW_UPDATE:
                    inc = int.from_bytes(payload, "big")
                    if fsid == sid:
                        window += inc
                    elif fsid == 0:
                        conn_window += inc
                continue
            peer.send(frame(DATA, 0, sid, data[sent : sent + n]))
            sent += n
            window -= n
            conn_window -= n
        peer.send(peer.ok(sid))
        await peer.frame_of(GOAWAY_FRAME)

    ch = LeanChannel(await serve(script))
    assert await asyncio.wait_for(read_all(await ch.start(PATH, b"req")), 30) == [big]
    await ch.close()
