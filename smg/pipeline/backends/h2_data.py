"""The streams of the HTTP/2 client connection, receive side (pure; no IO): closing and resetting
them, and the DATA frames that `h2_client.ClientConnection.receive` leaves to the general path
(padded, several messages or part of one, END_STREAM, compressed, above the size cap).

`StreamSide` builds on `h2_send.SendSide`; `ClientConnection` builds on it and sets what it
declares. Messages go out as the connection's events (see `h2_client`): one MESSAGES event a
stream and read, whose list is the stream's `box` (the receive loop's short path appends to the
same list, so a stream's messages stay in order whichever path each frame took).
"""

from __future__ import annotations

import struct

from smg.pipeline.backends.h2_flow import StreamCredit, _Stream
from smg.pipeline.backends.h2_frames import (
    ERROR_CANCEL,
    ERROR_FLOW_CONTROL,
    FLAG_END_STREAM,
    FLAG_PADDED,
    RST_STREAM,
    H2ProtocolError,
    frame,
)
from smg.pipeline.backends.h2_send import SendSide

MESSAGES, HEADERS, END, RESET, GOAWAY, PING_ACK, STREAM_ERROR = range(7)  # the events' kinds

_message_head = struct.Struct(">BL").unpack_from  # a gRPC message's prefix: compressed, length

Event = tuple[int, int, object]


class StreamSide(SendSide):
    """Streams leaving, stream errors, and the general DATA path."""

    credit: StreamCredit
    max_message_bytes: int
    next_stream_id: int
    _reads: int  # calls of `receive`: whose MESSAGES list a stream's `box` is

    def _close_stream(self, sid: int) -> _Stream | None:
        stream = self.streams.pop(sid, None)
        if stream is not None:
            self._blocked.pop(sid, None)
            self.credit.closed(sid, stream)
        return stream

    def _stream_error(
        self, sid: int, code: int, detail: str, events: list[Event], status: str = "INTERNAL"
    ) -> None:
        """RFC 9113 stream error: reset the stream, tell the caller why, go on with the rest."""
        if self._close_stream(sid) is not None:
            self._owe(frame(RST_STREAM, 0, sid, code.to_bytes(4, "big")))
            events.append((STREAM_ERROR, sid, (status, detail)))

    def _check_opened(self, sid: int, what: str) -> None:
        """Frames on a stream we never opened (idle, or even: a push) are a connection error."""
        if not sid & 1 or sid >= self.next_stream_id:
            raise H2ProtocolError(f"{what} on stream {sid}, which we never opened")

    def _on_data(  # any other DATA frame (the connection window counted): view[start:end]
        self, sid: int, flags: int, view: bytes | bytearray, start: int, end: int, events: list
    ) -> None:
        if sid == 0:
            raise H2ProtocolError("DATA on stream 0")
        size = end - start
        pad = 0  # padding: counted, nothing for the caller to take
        if flags & FLAG_PADDED:
            if not size or view[start] >= size:
                raise H2ProtocolError("bad DATA padding")
            pad = view[start] + 1
            end -= view[start]
            start += 1
        stream = self.streams.get(sid)
        if stream is None:
            self._check_opened(sid, "DATA")
            return  # a stream we cancelled: its bytes still counted for the connection
        stream.recv_window -= size
        if stream.recv_window < 0:
            raise H2ProtocolError(
                f"DATA beyond stream {sid}'s flow-control window", ERROR_FLOW_CONTROL
            )
        if pad:
            stream.consumed += pad
        buf = stream.buf
        if buf:
            buf += view[start:end]
            data: bytes | bytearray = buf
            pos = 0
            end = len(buf)
        else:
            data = view
            pos = start
        first = pos
        copy = type(data) is not bytes  # a bytearray's slice is one: make the message bytes
        limit = self.max_message_bytes
        while end - pos >= 5:
            compressed, n = _message_head(data, pos)
            if compressed:
                raise H2ProtocolError("a compressed gRPC message (none was negotiated)")
            if n > limit:
                detail = f"a {n}-byte response message exceeds the {limit}-byte limit"
                self._stream_error(sid, ERROR_CANCEL, detail, events, "RESOURCE_EXHAUSTED")
                return
            if end - pos - 5 < n:
                break
            message = data[pos + 5 : pos + 5 + n]
            if stream.box_read != self._reads:  # (see `receive`)
                stream.box_read = self._reads
                stream.box = []
                events.append((MESSAGES, sid, stream.box))
            stream.box.append(bytes(message) if copy else message)  # type: ignore[arg-type]
            pos += 5 + n
        stream.unread += pos - first
        if pos < end:
            if data is buf:
                del buf[:pos]  # in place: a message spread over many frames stays linear
            else:
                stream.buf = bytearray(data[pos:end])
        elif buf:
            stream.buf = bytearray()
        if flags & FLAG_END_STREAM:
            self._close_stream(sid)
            events.append((END, sid, []))  # no trailers: the caller decides what that means
            return
        if pos == first or pad:  # (messages handed out: consuming them settles the credit)
            self.credit.update(sid, stream)
