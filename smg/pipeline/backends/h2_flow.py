"""Receive flow control of an HTTP/2 client's streams: credit on consumption (pure; no IO).

A stream's window is refilled only for message bytes the caller reports taken (`consumed`), so a
caller that stops reading stops the server after one window, and the engine feels the
back-pressure. Credit is batched (one WINDOW_UPDATE once half the window is consumed, as grpc-go
and h2 do), except that the message the caller waits for is admitted whole, however much bigger
than the window it is: an overdraft, paid back when that message is consumed. Without it a
message larger than the window, or one that the unsent half of a batch holds back, would
deadlock the call.

Overdrafts come out of one budget per connection (`max_overdraft_bytes`), so what a connection
buffers is at most the stream window per open stream plus that budget, whatever the engine
announces. A stream whose overdraft does not fit waits until another stream's overdraft comes
back (its big message consumed, or the stream closed); a message that could never fit (larger
than the window plus the whole budget) fails its stream at once. Before the budget, a message
header announcing 256 MiB got a 256 MiB grant on every stream that asked.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from smg.pipeline.backends.h2_frames import WINDOW_UPDATE, frame


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
    box: list[bytes] = field(default_factory=list)  # the messages handed out in read `box_read`
    box_read: int = 0  # (the list of the MESSAGES event of that read of the connection)
    # invariant: recv_window + len(buf) + unread + consumed == stream window + overdraft


class StreamCredit:
    """The stream-level WINDOW_UPDATEs of one connection: appended to `out`, the connection's
    queue of frames to send; `streams` is its table of open streams."""

    __slots__ = (
        "_out",
        "_starved",
        "_streams",
        "half_window",
        "max_message_bytes",
        "max_overdraft_bytes",
        "overdraft",
        "stream_window",
    )

    def __init__(
        self,
        out: list[bytes],
        streams: dict[int, _Stream],
        *,
        stream_window: int,
        max_message_bytes: int,
        max_overdraft_bytes: int,
    ) -> None:
        self._out = out
        self._streams = streams
        self.stream_window = stream_window
        self.half_window = stream_window // 2  # the batch worth a WINDOW_UPDATE
        self.max_overdraft_bytes = max_overdraft_bytes
        # the largest message that can ever be admitted: the window plus the whole budget
        self.max_message_bytes = min(max_message_bytes, stream_window + max_overdraft_bytes - 5)
        self.overdraft = 0  # outstanding over all streams
        self._starved: dict[int, None] = {}  # streams waiting for budget, oldest first

    def consumed(self, sid: int, nbytes: int) -> None:
        """The caller took `nbytes` of stream `sid`'s messages (ignored once it ended)."""
        stream = self._streams.get(sid)
        if stream is None:
            return
        stream.unread -= nbytes
        if not stream.overdraft:  # the common case: no call when nothing is due (`update`'s test)
            stream.consumed += nbytes
            if stream.consumed < self.half_window and (
                stream.unread or (not stream.buf and stream.recv_window >= 5)
            ):
                return
            self.update(sid, stream)
            return
        repaid = min(nbytes, stream.overdraft)  # an admitted big message's overdraft: paid first
        stream.overdraft -= repaid
        self.overdraft -= repaid
        stream.consumed += nbytes - repaid
        self.update(sid, stream)
        if repaid and self._starved:
            self._feed_starved()

    def closed(self, sid: int, stream: _Stream) -> None:
        """`stream` left the table: its overdraft goes back to the budget."""
        self._starved.pop(sid, None)
        if stream.overdraft:
            self.overdraft -= stream.overdraft
            stream.overdraft = 0
            if self._starved:
                self._feed_starved()

    def update(self, sid: int, stream: _Stream) -> None:
        """Send the batch of consumed bytes once it is half the window; and whatever it takes,
        beyond the window if need be, to admit the message the caller waits for (it has read
        everything else, so nothing else would ever refill the window), budget permitting."""
        due = stream.consumed
        if due < self.half_window and (
            stream.unread or (not stream.buf and stream.recv_window >= 5)
        ):
            return  # no batch due, and no message waiting for room: nothing to grant
        grant = due if due >= self.half_window else 0
        if not stream.unread:
            buf = stream.buf
            missing = (5 + int.from_bytes(buf[1:5], "big") if len(buf) >= 5 else 5) - len(buf)
            short = missing - stream.recv_window
            if short > grant:
                want = max(short, due)
                if self.overdraft + want - due <= self.max_overdraft_bytes:
                    grant = want
                    self._starved.pop(sid, None)
                else:
                    self._starved[sid] = None
        if grant:
            stream.overdraft += grant - due
            self.overdraft += grant - due
            stream.consumed = 0
            stream.recv_window += grant
            self._out.append(frame(WINDOW_UPDATE, 0, sid, grant.to_bytes(4, "big")))

    def _feed_starved(self) -> None:
        for sid in list(self._starved):
            stream = self._streams.get(sid)
            if stream is None or stream.unread:
                del self._starved[sid]  # gone, or no longer waiting on the network
            else:
                self.update(sid, stream)
            if self.overdraft >= self.max_overdraft_bytes:
                return
