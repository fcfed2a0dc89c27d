"""A sans-IO HTTP/2 client connection for gRPC calls with one request message (RFC 9113).

Bytes in (`receive`), events and bytes out (`data_to_send`); no sockets, no clocks. It does what
a gRPC client needs and no more: it opens streams with one request message (unary or
server-streaming calls), reassembles the length-prefixed gRPC messages of each stream's DATA, and
answers the connection-level duties itself (SETTINGS and their ACK, PING ACK, flow control in
both directions, GOAWAY). No server push, no priorities, no compression.

Receive flow control is credit on consumption at the stream level: a stream's window is refilled
only for message bytes the caller reports taken (`consumed`), so a caller that stops reading stops
the server after one window, and the engine feels the back-pressure. Credit is batched (one
WINDOW_UPDATE once half the window is consumed, as grpc-go and h2 do), except that the message
the caller waits for is always admitted whole, however much bigger than the window it is (an
overdraft, paid back when that message is consumed); otherwise a message larger than the window,
or one that the unsent half of a batch holds back, would deadlock the call. The connection window
is refilled on receipt instead (also batched): see `ClientConnection`.

Events are plain tuples, built per gRPC message on the hot path:
    (MESSAGE, stream_id, payload)     one whole gRPC message (without its 5-byte prefix)
    (HEADERS, stream_id, headers)     the response headers
    (END, stream_id, trailers)        the stream ended; trailers (a list, maybe empty)
    (RESET, stream_id, error_code)    the server reset the stream
    (GOAWAY, last_stream_id, detail)  no new streams on this connection
    (PING_ACK, 0, payload)            an answer to our `ping`

Errors: `H2ProtocolError` when the peer breaks the protocol (the connection is unusable).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from smg.pipeline.backends import hpack
from smg.pipeline.backends.h2_frames import (
    CONTINUATION,
    DATA,
    DEFAULT_MAX_FRAME,
    DEFAULT_WINDOW,
    ERROR_CANCEL,
    ERROR_NO_ERROR,
    FLAG_ACK,
    FLAG_END_HEADERS,
    FLAG_END_STREAM,
    FLAG_PADDED,
    FLAG_PRIORITY,
    GOAWAY_FRAME,
    HEADERS_FRAME,
    MAX_STREAM_ID,
    MAX_WINDOW,
    PING,
    PREFACE,
    PUSH_PROMISE,
    RST_STREAM,
    SETTINGS,
    SETTINGS_ENABLE_PUSH,
    SETTINGS_INITIAL_WINDOW_SIZE,
    SETTINGS_MAX_CONCURRENT_STREAMS,
    SETTINGS_MAX_FRAME_SIZE,
    WINDOW_UPDATE,
    frame,
)

MESSAGE, HEADERS, END, RESET, GOAWAY, PING_ACK = range(6)

Event = tuple[int, int, object]


class H2ProtocolError(Exception):
    """The peer broke HTTP/2 (or gRPC framing): the connection cannot go on. `events` holds
    what the same `receive` call parsed before the error (deliver it, then fail)."""

    events: list[Event] = []  # set per instance by `receive`


@dataclass(slots=True)
class _Stream:
    send_window: int
    recv_window: int  # what the server may still send on this stream
    pending: bytes = b""  # request bytes (gRPC-framed) not sent yet for lack of window
    buf: bytearray = field(default_factory=bytearray)  # a gRPC message still incomplete
    unread: int = 0  # bytes of messages handed out as events, not yet `consumed`
    consumed: int = 0  # consumed (or padding) bytes not yet credited back: the batch
    overdraft: int = 0  # credit granted beyond the window to admit one big message
    got_headers: bool = False
    # invariant: recv_window + len(buf) + unread + consumed == stream window + overdraft


class ClientConnection:
    """One HTTP/2 connection, client side, as a state machine.

    `stream_window` bounds what one stream's server may send ahead of the caller's reading (plus,
    transiently, the one message the caller waits for). The connection window is credited as DATA
    arrives, not as it is consumed: with consumption credit there, a few stalled streams would
    spend the window shared by every other call on the connection (head-of-line blocking of
    healthy requests behind a stalled HTTP client), which is why grpc-go does the same. Memory
    stays bounded all the same: by the stream window times the open streams (themselves bounded
    by what the gateway admits), which the per-stream credit enforces.
    """

    def __init__(
        self,
        *,
        stream_window: int = 256 * 1024,
        connection_window: int = 16 * 1024 * 1024,
        max_message_bytes: int = 256 * 1024 * 1024,
    ) -> None:
        self.stream_window = stream_window
        self.connection_window = connection_window
        self.max_message_bytes = max_message_bytes
        self.decoder = hpack.Decoder()
        self.streams: dict[int, _Stream] = {}
        self.next_stream_id = 1
        self.goaway = False
        self.peer_max_streams = MAX_STREAM_ID  # until the server's SETTINGS say otherwise
        self.peer_initial_window = DEFAULT_WINDOW
        self.peer_max_frame = DEFAULT_MAX_FRAME
        self.send_window = DEFAULT_WINDOW  # the connection's, for our DATA
        self.recv_window = max(connection_window, DEFAULT_WINDOW)  # the server's, for its DATA
        self._unacked = 0  # DATA bytes received since our last connection WINDOW_UPDATE
        self._in = bytearray()
        self._out: list[bytes] = []
        self._header_block: tuple[int, int, bytearray] | None = None  # (stream, flags, block)
        self._out.append(PREFACE)
        settings = (
            (SETTINGS_ENABLE_PUSH, 0),
            (SETTINGS_INITIAL_WINDOW_SIZE, stream_window),
        )
        self._out.append(
            frame(SETTINGS, 0, 0, b"".join(k.to_bytes(2, "big") + v.to_bytes(4, "big")
                                            for k, v in settings))
        )  # fmt: skip
        if connection_window > DEFAULT_WINDOW:
            inc = connection_window - DEFAULT_WINDOW
            self._out.append(frame(WINDOW_UPDATE, 0, 0, inc.to_bytes(4, "big")))

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
        if self.streams.pop(stream_id, None) is not None:
            self._out.append(frame(RST_STREAM, 0, stream_id, ERROR_CANCEL.to_bytes(4, "big")))

    def consumed(self, stream_id: int, nbytes: int) -> None:
        """The caller took `nbytes` of `stream_id`'s messages out (each message's payload plus
        its 5-byte prefix): the server may send that much more, once enough is due to be worth a
        WINDOW_UPDATE. A stream that ended is ignored."""
        stream = self.streams.get(stream_id)
        if stream is None:
            return
        stream.unread -= nbytes
        repaid = min(nbytes, stream.overdraft)
        stream.overdraft -= repaid
        stream.consumed += nbytes - repaid
        self._credit(stream_id, stream)

    def ping(self, payload: bytes) -> None:
        self._out.append(frame(PING, 0, 0, payload))

    def close(self, error_code: int = ERROR_NO_ERROR) -> None:
        """GOAWAY: we open no more streams (the server opens none, so its last id is 0)."""
        self.goaway = True
        self._out.append(frame(GOAWAY_FRAME, 0, 0, bytes(4) + error_code.to_bytes(4, "big")))

    def data_to_send(self) -> bytes:
        out = self._out
        if not out:
            return b""
        data = out[0] if len(out) == 1 else b"".join(out)
        out.clear()
        return data

    # --- sending -------------------------------------------------------------------------------
    def _send_headers(self, sid: int, block: bytes) -> None:
        size = self.peer_max_frame
        if len(block) <= size:
            self._out.append(frame(HEADERS_FRAME, FLAG_END_HEADERS, sid, block))
            return
        self._out.append(frame(HEADERS_FRAME, 0, sid, block[:size]))
        rest = block[size:]
        while rest:
            part, rest = rest[:size], rest[size:]
            self._out.append(frame(CONTINUATION, 0 if rest else FLAG_END_HEADERS, sid, part))

    def _flush_stream(self, sid: int, stream: _Stream) -> None:
        data = stream.pending
        while data:
            n = min(len(data), stream.send_window, self.send_window, self.peer_max_frame)
            if n <= 0:
                break
            part, data = data[:n], data[n:]
            stream.send_window -= n
            self.send_window -= n
            self._out.append(frame(DATA, 0 if data else FLAG_END_STREAM, sid, part))
        stream.pending = data

    def _flush_all(self) -> None:
        for sid, stream in self.streams.items():
            if stream.pending:
                self._flush_stream(sid, stream)

    # --- receiving -----------------------------------------------------------------------------
    def receive(self, data: bytes) -> list[Event]:
        events: list[Event] = []
        try:
            self._receive(data, events)
        except H2ProtocolError as exc:
            exc.events = events
            raise
        return events

    def _receive(self, data: bytes, events: list[Event]) -> None:
        buf = self._in
        if buf:
            buf += data
            view: bytes | bytearray = buf
        else:
            view = data
        pos, end = 0, len(view)
        while end - pos >= 9:
            length = int.from_bytes(view[pos : pos + 3], "big")
            if length > DEFAULT_MAX_FRAME:
                raise H2ProtocolError(f"a {length}-byte frame exceeds our maximum frame size")
            if end - pos - 9 < length:
                break
            kind = view[pos + 3]
            flags = view[pos + 4]
            sid = int.from_bytes(view[pos + 5 : pos + 9], "big") & 0x7FFFFFFF
            payload = view[pos + 9 : pos + 9 + length]
            pos += 9 + length
            if self._header_block is not None and kind != CONTINUATION:
                raise H2ProtocolError("a header block was interrupted")
            if kind == DATA:
                self._on_data(sid, flags, payload, events)
            else:
                self._on_control(kind, sid, flags, bytes(payload), events)
        if pos < end:
            self._in = bytearray(view[pos:])
        elif buf:
            self._in = bytearray()

    def _on_data(
        self, sid: int, flags: int, payload: bytes | bytearray, events: list[Event]
    ) -> None:
        if sid == 0:
            raise H2ProtocolError("DATA on stream 0")
        size = len(payload)
        self.recv_window -= size
        if self.recv_window < 0:
            raise H2ProtocolError("DATA beyond the connection's flow-control window")
        self._unacked += size
        if self._unacked >= self.connection_window // 2:
            self._out.append(frame(WINDOW_UPDATE, 0, 0, self._unacked.to_bytes(4, "big")))
            self.recv_window += self._unacked
            self._unacked = 0
        if flags & FLAG_PADDED:
            if not payload or payload[0] >= size:
                raise H2ProtocolError("bad DATA padding")
            payload = payload[1 : size - payload[0]]
        stream = self.streams.get(sid)
        if stream is None:
            return  # a stream we cancelled: its bytes still counted for the connection
        stream.recv_window -= size
        if stream.recv_window < 0:
            raise H2ProtocolError(f"DATA beyond stream {sid}'s flow-control window")
        stream.consumed += size - len(payload)  # padding: nothing for the caller to take
        buf = stream.buf
        if buf:
            buf += payload
            data: bytes | bytearray = buf
        else:
            data = payload
        pos, end = 0, len(data)
        while end - pos >= 5:
            if data[pos]:
                raise H2ProtocolError("a compressed gRPC message (none was negotiated)")
            n = int.from_bytes(data[pos + 1 : pos + 5], "big")
            if n > self.max_message_bytes:
                raise H2ProtocolError(f"a {n}-byte gRPC message exceeds the limit")
            if end - pos - 5 < n:
                break
            events.append((MESSAGE, sid, bytes(data[pos + 5 : pos + 5 + n])))
            pos += 5 + n
        stream.unread += pos
        if pos < end:
            stream.buf = bytearray(data[pos:])
        elif buf:
            stream.buf = bytearray()
        if flags & FLAG_END_STREAM:
            del self.streams[sid]
            events.append((END, sid, []))  # no trailers: the caller decides what that means
            return
        self._credit(sid, stream)

    def _credit(self, sid: int, stream: _Stream) -> None:
        """Send the batch of consumed bytes once it is half the window; and whatever it takes,
        beyond the window if need be, to admit the message the caller waits for (it has read
        everything else, so nothing else would ever refill the window)."""
        due = stream.consumed
        grant = due if due >= self.stream_window // 2 else 0
        if not stream.unread:
            buf = stream.buf
            missing = (5 + int.from_bytes(buf[1:5], "big") if len(buf) >= 5 else 5) - len(buf)
            short = missing - stream.recv_window
            if short > grant:
                grant = max(short, due)
        if grant:
            stream.overdraft += grant - due
            stream.consumed = 0
            stream.recv_window += grant
            self._out.append(frame(WINDOW_UPDATE, 0, sid, grant.to_bytes(4, "big")))

    def _on_control(
        self, kind: int, sid: int, flags: int, payload: bytes, events: list[Event]
    ) -> None:
        if kind == HEADERS_FRAME:
            if flags & FLAG_PADDED:
                if not payload or payload[0] >= len(payload):
                    raise H2ProtocolError("bad HEADERS padding")
                payload = payload[1 : len(payload) - payload[0]]
            if flags & FLAG_PRIORITY:
                payload = payload[5:]
            self._header_block = (sid, flags, bytearray(payload))
            if flags & FLAG_END_HEADERS:
                self._end_headers(events)
        elif kind == CONTINUATION:
            block = self._header_block
            if block is None or block[0] != sid:
                raise H2ProtocolError("CONTINUATION without its HEADERS")
            block[2].extend(payload)
            if flags & FLAG_END_HEADERS:
                self._end_headers(events)
        elif kind == RST_STREAM:
            if len(payload) != 4 or sid == 0:
                raise H2ProtocolError("bad RST_STREAM")
            if self.streams.pop(sid, None) is not None:
                events.append((RESET, sid, int.from_bytes(payload, "big")))
        elif kind == SETTINGS:
            self._on_settings(sid, flags, payload)
        elif kind == PING:
            if len(payload) != 8 or sid != 0:
                raise H2ProtocolError("bad PING")
            if flags & FLAG_ACK:
                events.append((PING_ACK, 0, payload))
            else:
                self._out.append(frame(PING, FLAG_ACK, 0, payload))
        elif kind == GOAWAY_FRAME:
            if len(payload) < 8:
                raise H2ProtocolError("bad GOAWAY")
            self.goaway = True
            last = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
            code = int.from_bytes(payload[4:8], "big")
            detail = f"GOAWAY error {code}: {payload[8:].decode('utf-8', 'replace')}"
            events.append((GOAWAY, last, detail))
        elif kind == WINDOW_UPDATE:
            if len(payload) != 4:
                raise H2ProtocolError("bad WINDOW_UPDATE")
            inc = int.from_bytes(payload, "big") & 0x7FFFFFFF
            if sid == 0:
                self.send_window += inc
                self._flush_all()
            else:
                stream = self.streams.get(sid)
                if stream is not None:
                    stream.send_window += inc
                    self._flush_stream(sid, stream)
        elif kind == PUSH_PROMISE:
            raise H2ProtocolError("PUSH_PROMISE, though we disabled push")
        # PRIORITY and unknown frame types are ignored

    def _end_headers(self, events: list[Event]) -> None:
        block = self._header_block
        assert block is not None
        self._header_block = None
        sid, flags, data = block
        try:
            headers = self.decoder.decode(bytes(data))  # always: it updates the HPACK state
        except hpack.HpackError as exc:
            raise H2ProtocolError(f"HPACK: {exc}") from None
        stream = self.streams.get(sid)
        if stream is None:
            return
        if flags & FLAG_END_STREAM:
            del self.streams[sid]
            if not stream.got_headers:
                events.append((HEADERS, sid, headers))  # trailers-only: both at once
            events.append((END, sid, headers))
            return
        if stream.got_headers:
            raise H2ProtocolError("a second HEADERS without END_STREAM")
        stream.got_headers = True
        events.append((HEADERS, sid, headers))

    def _on_settings(self, sid: int, flags: int, payload: bytes) -> None:
        if sid != 0 or len(payload) % 6:
            raise H2ProtocolError("bad SETTINGS")
        if flags & FLAG_ACK:
            return
        for i in range(0, len(payload), 6):
            key = int.from_bytes(payload[i : i + 2], "big")
            value = int.from_bytes(payload[i + 2 : i + 6], "big")
            if key == SETTINGS_MAX_CONCURRENT_STREAMS:
                self.peer_max_streams = value
            elif key == SETTINGS_INITIAL_WINDOW_SIZE:
                if value > MAX_WINDOW:
                    raise H2ProtocolError("SETTINGS_INITIAL_WINDOW_SIZE above 2^31-1")
                delta = value - self.peer_initial_window
                self.peer_initial_window = value
                for stream in self.streams.values():
                    stream.send_window += delta
            elif key == SETTINGS_MAX_FRAME_SIZE:
                if not DEFAULT_MAX_FRAME <= value <= 2**24 - 1:
                    raise H2ProtocolError("bad SETTINGS_MAX_FRAME_SIZE")
                self.peer_max_frame = value
            # HEADER_TABLE_SIZE: our encoder never indexes; ENABLE_PUSH and the rest: ignored
        self._out.append(frame(SETTINGS, FLAG_ACK, 0))
        self._flush_all()
