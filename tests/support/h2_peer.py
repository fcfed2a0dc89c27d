"""The server side of one scripted HTTP/2 (gRPC) connection, for tests of the lean gRPC path."""

from __future__ import annotations

import asyncio

from smg.pipeline.backends import hpack
from smg.pipeline.backends.h2_frames import (
    DATA,
    FLAG_END_HEADERS,
    FLAG_END_STREAM,
    HEADERS_FRAME,
    PREFACE,
    SETTINGS,
    frame,
)


class Peer:
    """The server side of one connection: read the client's frames, write ours."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.frames: list[tuple[int, int, int, bytes]] = []
        self.decoder = hpack.Decoder()
        self.request_headers: list[tuple[str, str]] = []

    async def start(self) -> int:
        """Read the preface, send SETTINGS, return the first request's stream id."""
        assert await self.reader.readexactly(len(PREFACE)) == PREFACE
        self.send(frame(SETTINGS, 0, 0))
        while True:
            kind, _, sid, _ = await self.next_frame()
            if kind == HEADERS_FRAME:
                return sid

    async def next_frame(self) -> tuple[int, int, int, bytes]:
        head = await self.reader.readexactly(9)
        length = int.from_bytes(head[:3], "big")
        payload = await self.reader.readexactly(length)
        got = (head[3], head[4], int.from_bytes(head[5:9], "big") & 0x7FFFFFFF, payload)
        self.frames.append(got)
        if got[0] == HEADERS_FRAME:
            self.request_headers = self.decoder.decode(payload)
        return got

    async def frame_of(self, kind: int) -> tuple[int, int, int, bytes]:
        while True:
            got = await self.next_frame()
            if got[0] == kind:
                return got

    def send(self, data: bytes) -> None:
        self.writer.write(data)

    def headers(self, sid: int, headers: list[tuple[str, str]], *, end: bool = False) -> bytes:
        flags = FLAG_END_HEADERS | (FLAG_END_STREAM if end else 0)
        return frame(HEADERS_FRAME, flags, sid, hpack.encode(headers))

    def messages(self, sid: int, *payloads: bytes) -> bytes:
        body = b"".join(b"\x00" + len(p).to_bytes(4, "big") + p for p in payloads)
        return frame(DATA, 0, sid, body)

    def ok(self, sid: int) -> bytes:
        return self.headers(sid, [("grpc-status", "0")], end=True)
