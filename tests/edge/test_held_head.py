"""EdgeResponse holds a streamed answer's head for the rest of the loop turn: the head and the
first body bytes written in that turn go out in one transport write (one syscall), and a head
with nothing after it still goes out at the end of the turn."""

from __future__ import annotations

import asyncio

from smg.api.edge_answers import EdgeWriter
from smg.edge.exchange import EdgeResponse
from smg.edge.h1 import RequestHead
from smg.edge.h1_write import ResponseWriter

SSE = ((b"Content-Type", b"text/event-stream"),)


class Transport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closing = False

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closing


class Conn:
    """What EdgeResponse uses of a connection (exchange.Connection)."""

    def __init__(self) -> None:
        head = RequestHead(b"POST", b"/v1/chat/completions", "1.1", [], True, False, 0)
        self.response = ResponseWriter(head)
        self.transport = Transport()
        self.loop = asyncio.get_running_loop()
        self.write_paused = False
        self.closing = False
        self.body_done = True

    def before_head(self) -> None:
        pass

    async def drain(self) -> None:
        pass


def response() -> tuple[EdgeResponse, Conn]:
    conn = Conn()
    return EdgeResponse(conn), conn  # type: ignore[arg-type]


async def test_the_head_and_the_first_chunk_go_out_in_one_write() -> None:
    resp, conn = response()
    await resp.start(200, SSE)
    assert conn.transport.writes == []
    assert resp.write_nowait(b"data: 1\n\n")
    writes = conn.transport.writes
    assert len(writes) == 1
    assert writes[0].startswith(b"HTTP/1.1 200 OK\r\n")
    assert writes[0].endswith(b"\r\n\r\n9\r\ndata: 1\n\n\r\n")
    await resp.write(b"data: 2\n\n")  # later writes are the chunk alone
    await resp.end()
    await asyncio.sleep(0)  # the turn's end: nothing held is left to flush
    assert conn.transport.writes[1:] == [b"9\r\ndata: 2\n\n\r\n", b"0\r\n\r\n"]


async def test_a_head_alone_goes_out_at_the_end_of_the_turn() -> None:
    resp, conn = response()
    await resp.start(200, SSE)
    assert conn.transport.writes == []
    await asyncio.sleep(0)
    assert len(conn.transport.writes) == 1
    assert conn.transport.writes[0].startswith(b"HTTP/1.1 200 OK\r\n")
    assert conn.transport.writes[0].endswith(b"chunked\r\n\r\n")
    await resp.write(b"x")
    assert conn.transport.writes[1] == b"1\r\nx\r\n"


async def test_an_answer_started_and_ended_at_once_is_one_write() -> None:
    resp, conn = response()
    await resp.start(204, ())
    await resp.end()
    await asyncio.sleep(0)
    assert conn.transport.writes == [b"HTTP/1.1 204 No Content\r\n\r\n"]


async def test_a_closed_client_gets_no_late_head() -> None:
    resp, conn = response()
    await resp.start(200, SSE)
    conn.transport.closing = True
    await asyncio.sleep(0)
    assert conn.transport.writes == []


async def test_the_last_bytes_and_the_end_go_out_in_one_write() -> None:
    resp, conn = response()
    await resp.start(200, SSE)
    assert resp.write_nowait(b"data: 1\n\n")
    await resp.end(b"data: [DONE]\n\n")
    assert conn.transport.writes[1:] == [b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n"]
    assert resp.sent == len(b"data: 1\n\n") + len(b"data: [DONE]\n\n")
    assert conn.response.finished


async def test_a_held_head_the_last_bytes_and_the_end_are_one_write() -> None:
    resp, conn = response()
    await resp.start(200, SSE)
    await resp.end(b"data: [DONE]\n\n")
    await asyncio.sleep(0)
    assert len(conn.transport.writes) == 1
    out = conn.transport.writes[0]
    assert out.startswith(b"HTTP/1.1 200 OK\r\n")
    assert out.endswith(b"chunked\r\n\r\ne\r\ndata: [DONE]\n\n\r\n0\r\n\r\n")


async def test_the_flows_write_eof_ends_in_one_write() -> None:
    """What a streamed answer's last frames take through aiohttp's `write_eof` on the edge."""
    resp, conn = response()
    writer = EdgeWriter(resp)
    await resp.start(200, SSE)
    assert writer.write_nowait(b"data: 1\n\n")
    await writer.write_eof(bytearray(b"data: [DONE]\n\n"))
    assert conn.transport.writes[1:] == [b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n"]
    assert writer.output_size == len(b"data: 1\n\n") + len(b"data: [DONE]\n\n")
