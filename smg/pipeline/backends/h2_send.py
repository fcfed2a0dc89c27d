"""The sending half of the HTTP/2 client connection (pure; no IO): our frames, the send windows.

`SendSide` queues what the connection has to send (`data_to_send` takes it) and keeps the
windows and the settings the server grants us (`_on_settings`). `h2_client.ClientConnection`
builds on it. Two bounds against an engine that is not trusted:

- Frames we owe the peer (PING and SETTINGS ACKs, stream resets) count until the shell takes the
  queue; past `MAX_OWED_CONTROL_FRAMES` that is the peer's fault (ENHANCE_YOUR_CALM). A shell
  that stops taking the queue while the transport cannot write (asyncio's `pause_writing`) thus
  turns a PING flood from an engine that never reads into a closed connection, instead of a send
  buffer that grows without end.
- Windows follow RFC 9113 §6.9: a WINDOW_UPDATE of 0 is a PROTOCOL_ERROR, one that takes a window
  past 2^31-1 a FLOW_CONTROL_ERROR (of the connection on stream 0, else of the stream), and so is
  a SETTINGS_INITIAL_WINDOW_SIZE change that takes a stream's window past it (§6.9.2).
"""

from __future__ import annotations

from smg.pipeline.backends.h2_flow import _Stream
from smg.pipeline.backends.h2_frames import (
    CONTINUATION,
    DATA,
    DEFAULT_MAX_FRAME,
    DEFAULT_WINDOW,
    ERROR_ENHANCE_YOUR_CALM,
    ERROR_FLOW_CONTROL,
    ERROR_FRAME_SIZE,
    ERROR_NO_ERROR,
    ERROR_PROTOCOL,
    FLAG_ACK,
    FLAG_END_HEADERS,
    FLAG_END_STREAM,
    GOAWAY_FRAME,
    HEADERS_FRAME,
    MAX_STREAM_ID,
    MAX_WINDOW,
    PING,
    PREFACE,
    SETTINGS,
    SETTINGS_ENABLE_PUSH,
    SETTINGS_INITIAL_WINDOW_SIZE,
    SETTINGS_MAX_CONCURRENT_STREAMS,
    SETTINGS_MAX_FRAME_SIZE,
    H2ProtocolError,
    frame,
)

MAX_OWED_CONTROL_FRAMES = 256  # ACKs and resets queued while the peer does not read them


class SendSide:
    """Our frames and the windows for our DATA."""

    def __init__(self) -> None:
        self.streams: dict[int, _Stream] = {}
        self.goaway = False
        self.peer_initial_window = DEFAULT_WINDOW
        self.peer_max_frame = DEFAULT_MAX_FRAME
        self.peer_max_streams = MAX_STREAM_ID  # until the server's SETTINGS say otherwise
        self.send_window = DEFAULT_WINDOW  # the connection's, for our DATA
        self.out: list[bytes] = [PREFACE]  # frames to send, oldest first (`data_to_send`)
        self._owed = 0  # frames answering the peer, queued since the queue was last taken
        self._blocked: dict[int, None] = {}  # streams with request bytes waiting for window

    def ping(self, payload: bytes) -> None:
        self.out.append(frame(PING, 0, 0, payload))

    def close(self, error_code: int = ERROR_NO_ERROR) -> None:
        """GOAWAY: we open no more streams (the server opens none, so its last id is 0)."""
        self.goaway = True
        self.out.append(frame(GOAWAY_FRAME, 0, 0, bytes(4) + error_code.to_bytes(4, "big")))

    def data_to_send(self) -> bytes:
        out = self.out
        self._owed = 0
        if not out:
            return b""
        data = out[0] if len(out) == 1 else b"".join(out)
        out.clear()
        return data

    def _owe(self, data: bytes) -> None:
        """Queue a frame the peer's frame calls for (an ACK, a reset), within the bound."""
        self._owed += 1
        if self._owed > MAX_OWED_CONTROL_FRAMES:
            raise H2ProtocolError(
                "the engine keeps sending frames that need an answer without reading the answers",
                ERROR_ENHANCE_YOUR_CALM,
            )
        self.out.append(data)

    def _send_headers(self, sid: int, block: bytes) -> None:
        size = self.peer_max_frame
        if len(block) <= size:
            self.out.append(frame(HEADERS_FRAME, FLAG_END_HEADERS, sid, block))
            return
        self.out.append(frame(HEADERS_FRAME, 0, sid, block[:size]))
        rest = block[size:]
        while rest:
            part, rest = rest[:size], rest[size:]
            self.out.append(frame(CONTINUATION, 0 if rest else FLAG_END_HEADERS, sid, part))

    def _flush_stream(self, sid: int, stream: _Stream) -> None:
        data = stream.pending
        while data:
            n = min(len(data), stream.send_window, self.send_window, self.peer_max_frame)
            if n <= 0:
                break
            part, data = data[:n], data[n:]
            stream.send_window -= n
            self.send_window -= n
            self.out.append(frame(DATA, 0 if data else FLAG_END_STREAM, sid, part))
        stream.pending = data
        if data:
            self._blocked[sid] = None
        else:
            self._blocked.pop(sid, None)

    def _flush_blocked(self) -> None:
        """Send what waited for window: only the streams that have some (usually none)."""
        for sid in list(self._blocked):
            stream = self.streams.get(sid)
            if stream is None:
                del self._blocked[sid]
            else:
                self._flush_stream(sid, stream)

    def _window_update(self, sid: int, inc: int) -> tuple[int, str] | None:
        """Apply a WINDOW_UPDATE; a stream error to raise as (code, detail), or None. Connection
        errors raise."""
        if sid == 0:
            if inc == 0:
                raise H2ProtocolError("a connection WINDOW_UPDATE of 0")
            self.send_window += inc
            if self.send_window > MAX_WINDOW:
                raise H2ProtocolError(
                    "WINDOW_UPDATE took the connection window past 2^31-1", ERROR_FLOW_CONTROL
                )
            self._flush_blocked()
            return None
        stream = self.streams.get(sid)
        if stream is None:
            return None  # a stream that ended: its window does not matter any more
        if inc == 0:
            return ERROR_PROTOCOL, "a stream WINDOW_UPDATE of 0"
        stream.send_window += inc
        if stream.send_window > MAX_WINDOW:
            return ERROR_FLOW_CONTROL, "WINDOW_UPDATE took the stream's window past 2^31-1"
        self._flush_stream(sid, stream)
        return None

    def _initial_window(self, window: int) -> None:
        """The server's SETTINGS_INITIAL_WINDOW_SIZE changed: every open stream's window moves
        by the difference (once per SETTINGS frame, whatever the number of entries)."""
        if window > MAX_WINDOW:
            raise H2ProtocolError("SETTINGS_INITIAL_WINDOW_SIZE above 2^31-1", ERROR_FLOW_CONTROL)
        delta = window - self.peer_initial_window
        self.peer_initial_window = window
        if delta:
            for stream in self.streams.values():
                stream.send_window += delta
                if stream.send_window > MAX_WINDOW:
                    raise H2ProtocolError(
                        "SETTINGS_INITIAL_WINDOW_SIZE took a stream window past 2^31-1",
                        ERROR_FLOW_CONTROL,
                    )

    def _on_settings(self, sid: int, flags: int, payload: bytes) -> None:
        if sid != 0:
            raise H2ProtocolError("SETTINGS on a stream")
        if flags & FLAG_ACK:
            if payload:
                raise H2ProtocolError("a SETTINGS ACK with a payload", ERROR_FRAME_SIZE)
            return
        if len(payload) % 6:
            raise H2ProtocolError("bad SETTINGS", ERROR_FRAME_SIZE)
        window = None  # applied once per frame, however many entries set it
        for i in range(0, len(payload), 6):
            key = int.from_bytes(payload[i : i + 2], "big")
            value = int.from_bytes(payload[i + 2 : i + 6], "big")
            if key == SETTINGS_MAX_CONCURRENT_STREAMS:
                self.peer_max_streams = value
            elif key == SETTINGS_INITIAL_WINDOW_SIZE:
                window = value
            elif key == SETTINGS_MAX_FRAME_SIZE:
                if not DEFAULT_MAX_FRAME <= value <= 2**24 - 1:
                    raise H2ProtocolError("bad SETTINGS_MAX_FRAME_SIZE")
                self.peer_max_frame = value
            elif key == SETTINGS_ENABLE_PUSH and value != 0:
                raise H2ProtocolError("a server may not enable push")
            # HEADER_TABLE_SIZE: our encoder never indexes; the rest: ignored
        if window is not None:
            self._initial_window(window)
        self._owe(frame(SETTINGS, FLAG_ACK, 0))
        self._flush_blocked()
