"""Shared by the tests of slow clients: wait until a connection's client has stopped taking
response bytes (as the sweeper's samples show it), or until a sender's count stops moving; a
client that reads nothing past the answer's head."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Protocol

from smg.core.conn_deadlines import Sample


class Sampled(Protocol):
    def sample(self) -> Sample: ...


async def until_stalled(conn: Sampled, *, quiet_s: float = 0.2, within_s: float = 5.0) -> int:
    """Poll `conn.sample()` until bytes wait and none was taken for `quiet_s`; the bytes taken
    by then. Fails if that does not happen within `within_s`."""
    last, still, need = -1, 0, round(quiet_s / 0.01)
    for _ in range(round(within_s / 0.01)):
        await asyncio.sleep(0.01)
        sample = conn.sample()
        still = still + 1 if sample.sent == last and sample.buffered > 0 else 0
        last = sample.sent
        if still >= need:
            return last
    raise AssertionError("the stream never filled the buffers")


async def until_still(
    count: Callable[[], int], *, quiet_s: float = 0.3, within_s: float = 10.0
) -> int:
    """Poll `count()` until it has not moved for `quiet_s`; its value then. Fails if that does
    not happen within `within_s` (a sender that was never held back)."""
    last, still, need = -1, 0, round(quiet_s / 0.01)
    for _ in range(round(within_s / 0.01)):
        await asyncio.sleep(0.01)
        now = count()
        still = still + 1 if now == last else 0
        last = now
        if still >= need:
            return last
    raise AssertionError("the sender was never held back")


async def slow_client(
    port: int, request: bytes
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A loopback client with a 64 KiB receive buffer that sent `request` and read its
    answer's head, and reads nothing more until told."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    sock.connect(("127.0.0.1", port))
    sock.setblocking(False)
    reader, writer = await asyncio.open_connection(sock=sock, limit=1024 * 1024)
    writer.write(request)
    await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5.0)
    return reader, writer
