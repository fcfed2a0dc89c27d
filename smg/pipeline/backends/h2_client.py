"""A sans-IO HTTP/2 client connection for gRPC calls with one request message (RFC 9113).

Bytes in (`receive`), events and bytes out (`data_to_send`); no sockets, no clocks. It does what
a gRPC client needs and no more: it opens streams with one request message (unary or
server-streaming calls), reassembles the length-prefixed gRPC messages of each stream's DATA, and
answers the connection-level duties itself (SETTINGS and their ACK, PING ACK, flow control in
both directions, GOAWAY). No server push, no priorities, no compression.

The parts: `h2_send` (our frames, the send windows), `h2_data` (streams, the general DATA path),
`h2_flow` (receive flow control: credit on consumption, with an overdraft budget for messages
bigger than the window), `h2_headers` (header blocks and HPACK). The engine is not trusted
(issue 10, finding 16): whatever it sends, what we hold stays bounded (header blocks, owed
control frames, messages and overdrafts), and protocol errors follow RFC 9113: a connection error
queues a GOAWAY with its code and raises `H2ProtocolError`; a stream error resets that stream
(STREAM_ERROR) and the others go on.

Events are plain tuples, one per stream and read of the socket on the hot path:
    (MESSAGES, stream_id, payloads)   the whole gRPC messages (without their 5-byte prefixes)
                                      this read brought for the stream, in order (a list)
    (HEADERS, stream_id, headers)     the response headers
    (END, stream_id, trailers)        the stream ended; trailers (a list, maybe empty)
    (RESET, stream_id, error_code)    the server reset the stream
    (GOAWAY, last_stream_id, detail)  no new streams on this connection
    (PING_ACK, 0, payload)            an answer to our `ping`
    (STREAM_ERROR, stream_id, (status, detail))  we reset the stream: the server broke the
                                      protocol on it or sent a message above our limit; status
                                      is the gRPC code name to fail the call with
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from smg.pipeline.backends.h2_data import (
    END,
    GOAWAY,
    HEADERS,
    MESSAGES,
    PING_ACK,
    RESET,
    STREAM_ERROR,
    Event,
    StreamSide,
)
from smg.pipeline.backends.h2_flow import StreamCredit, _Stream
from smg.pipeline.backends.h2_frames import (
    CONTINUATION,
    DATA,
    DEFAULT_MAX_FRAME,
    DEFAULT_WINDOW,
    ERROR_CANCEL,
    ERROR_FLOW_CONTROL,
    ERROR_FRAME_SIZE,
    FLAG_ACK,
    FLAG_END_STREAM,
    GOAWAY_FRAME,
    HEADERS_FRAME,
    MAX_STREAM_ID,
    MAX_WINDOW,
    PING,
    PUSH_PROMISE,
    RST_STREAM,
    SETTINGS,
    SETTINGS_ENABLE_PUSH,
    SETTINGS_INITIAL_WINDOW_SIZE,
    SETTINGS_MAX_HEADER_LIST_SIZE,
    WINDOW_UPDATE,
    H2ProtocolError,
    frame,
)
from smg.pipeline.backends.h2_headers import MAX_HEADER_LIST_BYTES, HeaderBlocks, Headers

__all__ = [
    "END",
    "GOAWAY",
    "HEADERS",
    "MESSAGES",
    "PING_ACK",
    "RESET",
    "STREAM_ERROR",
    "ClientConnection",
    "Event",
    "H2ProtocolError",
]

# a frame's 9-byte head: its length (24 bits: high byte, low 16), type, flags, stream id (with
# the reserved bit); a gRPC message's 5-byte prefix: compressed flag, length
_frame_head = struct.Struct(">BHBBL").unpack_from
_data_head = struct.Struct(">BHBBLBL").unpack_from  # the two at once, for a DATA frame


class ClientConnection(StreamSide):
    """One HTTP/2 connection, client side, as a state machine.

    `stream_window` bounds what one stream's server may send ahead of the caller's reading (plus,
    transiently, the one message the caller waits for, out of `max_overdraft_bytes` shared by the
    connection). The connection window is credited as DATA arrives, not as it is consumed: with
    consumption credit there, a few stalled streams would spend the window shared by every other
    call on the connection (head-of-line blocking of healthy requests behind a stalled HTTP
    client), which is why grpc-go does the same. Memory stays bounded all the same: by the stream
    window times the open streams (themselves bounded by what the gateway admits) plus the
    overdraft budget, which the per-stream credit enforces.
    """

    def __init__(
        self,
        *,
        stream_window: int = 256 * 1024,
        connection_window: int = 16 * 1024 * 1024,
        max_message_bytes: int = 256 * 1024 * 1024,
        max_overdraft_bytes: int = 32 * 1024 * 1024,
        max_header_list_bytes: int = MAX_HEADER_LIST_BYTES,
    ) -> None:
        super().__init__()
        if not 0 < stream_window <= MAX_WINDOW or not 0 < connection_window <= MAX_WINDOW:
            raise ValueError("HTTP/2 windows are 1 .. 2^31-1 bytes")
        self.stream_window = stream_window
        self.connection_window = connection_window
        self.header_blocks = HeaderBlocks(max_header_list_bytes)
        self.decoder = self.header_blocks.decoder
        self.credit = StreamCredit(
            self.out,
            self.streams,
            stream_window=stream_window,
            max_message_bytes=max_message_bytes,
            max_overdraft_bytes=max_overdraft_bytes,
        )
        # consumed(stream_id, nbytes): the caller took `nbytes` of a stream's messages out (each
        # message's payload plus its 5-byte prefix): the server may send that much more, once
        # enough is due to be worth a WINDOW_UPDATE; a stream that ended is ignored (the credit's
        # own method: one call a read per stream, not two)
        self.consumed: Callable[[int, int], None] = self.credit.consumed
        self.next_stream_id = 1
        # the server's window for its DATA; what it took since our last connection WINDOW_UPDATE
        # is the rest of `_full_window`, given back once that is half the connection window
        self.recv_window = self._full_window = max(connection_window, DEFAULT_WINDOW)
        self._update_at = self._full_window - connection_window // 2
        self.max_message_bytes = self.credit.max_message_bytes  # (the credit's: what fits)
        self._in = bytearray()
        self._reads = 0  # (see `StreamSide`)
        settings = (
            (SETTINGS_ENABLE_PUSH, 0),
            (SETTINGS_INITIAL_WINDOW_SIZE, stream_window),
            (SETTINGS_MAX_HEADER_LIST_SIZE, max_header_list_bytes),
        )
        self.out.append(
            frame(SETTINGS, 0, 0, b"".join(k.to_bytes(2, "big") + v.to_bytes(4, "big")
                                            for k, v in settings))
        )  # fmt: skip
        if connection_window > DEFAULT_WINDOW:
            inc = connection_window - DEFAULT_WINDOW
            self.out.append(frame(WINDOW_UPDATE, 0, 0, inc.to_bytes(4, "big")))

    # --- what the caller asks ------------------------------------------------------------------
    @property
    def can_open(self) -> bool:
        """False once the server said GOAWAY, the stream ids ran out or the server's stream limit
        is reached: open the next call on another connection."""
        return not self.goaway and len(self.streams) < self.peer_max_streams

    def start_call(self, header_block: bytes, message: bytes) -> int:
        """Open a stream with `header_block` (HPACK) and one gRPC request message."""
        if not self.can_open:
            raise RuntimeError("this connection takes no new streams")
        sid = self.next_stream_id
        self.next_stream_id += 2
        if self.next_stream_id > MAX_STREAM_ID:
            self.goaway = True  # ids spent: no new streams; the shell retires us when idle
        stream = _Stream(send_window=self.peer_initial_window, recv_window=self.stream_window)
        self.streams[sid] = stream
        self._send_headers(sid, header_block)
        stream.pending = b"\x00" + len(message).to_bytes(4, "big") + message
        self._flush_stream(sid, stream)
        return sid

    def cancel(self, stream_id: int) -> None:
        """RST_STREAM(CANCEL) for a stream we no longer want; later frames for it are dropped."""
        if self._close_stream(stream_id) is not None:
            self.out.append(frame(RST_STREAM, 0, stream_id, ERROR_CANCEL.to_bytes(4, "big")))

    # --- receiving -----------------------------------------------------------------------------
    def receive(self, data: bytes) -> list[Event]:
        events: list[Event] = []
        buf = self._in
        if buf:
            buf += data
            view: bytes | bytearray = buf
            copy = True  # a bytearray's slice is one: make the message bytes
        else:
            view = data
            copy = False
        pos, end = 0, len(view)
        read = self._reads = self._reads + 1
        in_block = self.header_blocks.sid  # (only a control frame changes it)
        streams, limit = self.streams, self.max_message_bytes
        # the connection window, counted per frame in a local, written back once a read (our
        # WINDOW_UPDATE leaves after the read: the server cannot count on it within the read)
        window = self.recv_window
        try:  # (one function, not a wrapper and its loop: a call less per read)
            while True:
                if end - pos >= 14:  # the frame head and, for DATA, its first message's prefix
                    high, low, kind, flags, sid, compressed, n = _data_head(view, pos)
                elif end - pos >= 9:
                    high, low, kind, flags, sid = _frame_head(view, pos)
                    compressed = n = -1
                else:
                    break
                length = high << 16 | low
                if length > DEFAULT_MAX_FRAME:
                    raise H2ProtocolError(
                        f"a {length}-byte frame exceeds our maximum frame size", ERROR_FRAME_SIZE
                    )
                start = pos + 9
                pos = start + length
                if pos > end:
                    pos = start - 9
                    break
                if in_block and kind != CONTINUATION:
                    raise H2ProtocolError("a header block was interrupted")
                if kind == DATA:
                    window -= length
                    if window < 0:
                        raise H2ProtocolError(
                            "DATA beyond the connection's flow-control window", ERROR_FLOW_CONTROL
                        )
                    stream = streams.get(sid)  # (None too for a reserved bit or stream 0)
                    # the common frame: one whole message, unpadded, nothing buffered before it
                    if (
                        n == length - 5
                        and not flags
                        and not compressed
                        and stream is not None
                        and not stream.buf
                        and n <= limit
                    ):
                        stream.recv_window -= length
                        if stream.recv_window < 0:
                            raise H2ProtocolError(
                                f"DATA beyond stream {sid}'s flow-control window",
                                ERROR_FLOW_CONTROL,
                            )
                        stream.unread += length
                        message = view[start + 5 : pos]
                        if copy:
                            message = bytes(message)
                        if stream.box_read == read:  # this read's MESSAGES list: one event
                            stream.box.append(message)  # type: ignore[arg-type]
                        else:
                            stream.box_read = read
                            stream.box = [message]  # type: ignore[list-item]
                            events.append((MESSAGES, sid, stream.box))
                    else:
                        self._on_data(sid & 0x7FFFFFFF, flags, view, start, pos, events)
                else:
                    payload = bytes(view[start:pos])
                    self._on_control(kind, sid & 0x7FFFFFFF, flags, payload, events)
                    in_block = self.header_blocks.sid
        except H2ProtocolError as exc:
            self.recv_window = window
            exc.events = events
            self.goaway = True  # and our GOAWAY says why (the server opens no streams: last 0)
            self.out.append(frame(GOAWAY_FRAME, 0, 0, bytes(4) + exc.code.to_bytes(4, "big")))
            raise
        if window <= self._update_at:
            due = self._full_window - window
            self.out.append(frame(WINDOW_UPDATE, 0, 0, due.to_bytes(4, "big")))
            window += due
        self.recv_window = window
        if pos < end:
            self._in = bytearray(view[pos:])
        elif buf:
            self._in = bytearray()
        return events

    def _on_control(
        self, kind: int, sid: int, flags: int, payload: bytes, events: list[Event]
    ) -> None:
        if kind == HEADERS_FRAME:
            done = self.header_blocks.headers(sid, flags, payload)
            if done is not None:
                self._on_headers(sid, *done, events)
        elif kind == CONTINUATION:
            done = self.header_blocks.continuation(sid, flags, payload)
            if done is not None:
                self._on_headers(sid, *done, events)
        elif kind == RST_STREAM:
            if sid == 0:
                raise H2ProtocolError("RST_STREAM on stream 0")
            if len(payload) != 4:
                raise H2ProtocolError("bad RST_STREAM", ERROR_FRAME_SIZE)
            if self._close_stream(sid) is not None:
                events.append((RESET, sid, int.from_bytes(payload, "big")))
            else:
                self._check_opened(sid, "RST_STREAM")
        elif kind == SETTINGS:
            self._on_settings(sid, flags, payload)
        elif kind == PING:
            if sid != 0:
                raise H2ProtocolError("PING on a stream")
            if len(payload) != 8:
                raise H2ProtocolError("bad PING", ERROR_FRAME_SIZE)
            if flags & FLAG_ACK:
                events.append((PING_ACK, 0, payload))
            else:
                self._owe(frame(PING, FLAG_ACK, 0, payload))
        elif kind == GOAWAY_FRAME:
            if sid != 0:
                raise H2ProtocolError("GOAWAY on a stream")
            if len(payload) < 8:
                raise H2ProtocolError("bad GOAWAY", ERROR_FRAME_SIZE)
            self.goaway = True
            last = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
            code = int.from_bytes(payload[4:8], "big")
            debug = payload[8:200].decode("utf-8", "replace")  # for a log line: keep it short
            events.append((GOAWAY, last, f"GOAWAY error {code}: {debug}"))
        elif kind == WINDOW_UPDATE:
            if len(payload) != 4:
                raise H2ProtocolError("bad WINDOW_UPDATE", ERROR_FRAME_SIZE)
            error = self._window_update(sid, int.from_bytes(payload, "big") & 0x7FFFFFFF)
            if error is not None:
                self._stream_error(sid, *error, events)
            elif sid and sid not in self.streams:
                self._check_opened(sid, "WINDOW_UPDATE")
        elif kind == PUSH_PROMISE:
            raise H2ProtocolError("PUSH_PROMISE, though we disabled push")
        # PRIORITY and unknown frame types are ignored

    def _on_headers(self, sid: int, flags: int, headers: Headers, events: list[Event]) -> None:
        stream = self.streams.get(sid)
        if stream is None:
            self._check_opened(sid, "HEADERS")
            return
        if flags & FLAG_END_STREAM:
            self._close_stream(sid)
            if not stream.got_headers:
                events.append((HEADERS, sid, headers))  # trailers-only: both at once
            events.append((END, sid, headers))
            return
        if stream.got_headers:
            raise H2ProtocolError("a second HEADERS without END_STREAM")
        stream.got_headers = True
        events.append((HEADERS, sid, headers))
