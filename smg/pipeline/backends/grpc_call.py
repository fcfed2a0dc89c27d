"""One call of the lean gRPC data path (`grpc_lean`): the messages a server-streaming call has
received, in arrival order, then its status; what its reader (`read_batch`) and its connection
(`_arrived`, `_end`) see of it. The connection it runs on is a `CallHost`: the call gives back
flow-control credit for what was read and resets its stream when cancelled or past its deadline.

A call is read in one of two ways. `read_batch` (a task awaits each batch) or, once `pipe` is
called, a `CallSink` gets them from the connection's callbacks: the messages of one read of the
socket together (`messages`), then the status (`ended`), with no future or task wake per read.
A piped call that is `hold`-ing keeps what arrives, unread and uncredited (so the engine stops
once the stream's window is spent), until `release`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

from smg.pipeline.backends.grpc_errors import CallError


class CallHost(Protocol):
    """What a call needs of its connection."""

    # the caller took `nbytes` of stream `sid`'s messages: credit them (written by the next
    # `flush_soon`, or by the read of the socket that delivered them, at its end)
    credit: Callable[[int, int], None]

    def flush_soon(self) -> None: ...
    def cancel_stream(self, sid: int) -> None: ...


class CallSink(Protocol):
    """Who reads a piped call (see the module doc)."""

    def messages(self, messages: list[bytes], size: int) -> None: ...  # size: their payloads
    def ended(self, status: str, details: str) -> None: ...


class LeanCall:
    """One server-streaming call: whole response messages in arrival order, then its status."""

    __slots__ = (
        "_conn",
        "_details",
        "_held",
        "_loop",
        "_messages",
        "_sid",
        "_sink",
        "_size",
        "_status",
        "_timer",
        "_told",
        "_waiter",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        # the loop it runs on (None: the running one, looked up when needed); kept, as each
        # lookup is a getpid() system call
        self._loop = loop
        self._conn: CallHost | None = None
        self._sid = 0
        self._messages: list[bytes] = []
        self._size = 0  # the payload bytes of `_messages` (counted as each arrives)
        self._waiter: asyncio.Future[None] | None = None
        self._status: str | None = None  # "OK" or an error code name once the call ended
        self._details = ""
        self._timer: asyncio.TimerHandle | None = None
        self._sink: CallSink | None = None  # piped: who gets the messages and the end
        self._held = False  # piped, and the sink wants nothing for now
        self._told = False  # piped, and the sink was told the end

    def done(self) -> bool:
        return self._status is not None

    async def read_batch(self) -> list[bytes]:
        """Every message received since the last read (at least one); [] once the call ended
        OK; raises `CallError` when it ended otherwise (after the messages before it)."""
        while True:
            messages = self._take()
            if messages:
                if self._conn is not None:
                    self._conn.flush_soon()  # their credit
                return messages
            status = self._status
            if status is not None:
                if status == "OK":
                    return messages
                raise CallError(status, self._details)
            loop = self._loop or asyncio.get_running_loop()
            waiter = self._waiter = loop.create_future()
            try:
                await waiter
            finally:
                self._waiter = None

    def _take(self) -> list[bytes]:
        """The messages received since the last take, credited to the engine (their payloads
        and 5-byte prefixes; outside a read of the socket the caller has it written)."""
        messages = self._messages
        if messages:
            self._messages = []
            conn = self._conn
            if conn is not None:
                conn.credit(self._sid, self._size + 5 * len(messages))
            self._size = 0
        return messages

    def pipe(self, sink: CallSink) -> None:
        """Hand what arrives to `sink` from now on (see the module doc); what arrived before
        is handed over now."""
        self._sink = sink
        self._deliver_now()

    def hold(self) -> None:
        """(piped) Keep what arrives, unread and uncredited, until `release`."""
        self._held = True

    def release(self) -> None:
        """(piped) Hand over what was kept (now, from the caller's task), then go on."""
        self._held = False
        self._deliver_now()

    def _deliver_now(self) -> None:
        """`_deliver` from the caller's task, not a read of the socket: the credit is written."""
        self._deliver()
        if self._conn is not None:
            self._conn.flush_soon()

    def _deliver(self) -> None:
        """(piped) What has arrived to the sink, then the end once the call is over."""
        sink = self._sink
        if sink is None or self._held:
            return
        size = self._size
        messages = self._take()
        if messages:
            sink.messages(messages, size)
        status = self._status
        if status is not None and not self._told and not self._messages:
            self._told = True
            sink.ended(status, self._details)

    def detach(self, grace_s: float = 5.0) -> None:
        """The caller needs nothing more from a call the engine is ending anyway (every choice
        finished, only the trailers are still to come): let the engine end it. Resetting every
        such stream looks like an HTTP/2 rapid-reset attack to a gRPC server, which answers
        GOAWAY. Reset only if the stream is still open after `grace_s`."""
        if self._status is None:
            if self._timer is not None:
                self._timer.cancel()
            loop = self._loop or asyncio.get_running_loop()
            self._timer = loop.call_later(grace_s, self._deadline)

    def cancel(self) -> None:
        """Reset the stream (the engine sees the call cancelled)."""
        if self._status is None:
            conn = self._conn
            if conn is not None:
                conn.cancel_stream(self._sid)
            self._end("CANCELLED", "cancelled by the gateway")

    # --- fed by the connection ---------------------------------------------------------------
    def _arrived(self, messages: list[bytes]) -> None:
        """The messages one read of the socket brought (ours to keep: the list too); a piped
        call hands them over at once, together (one write)."""
        size = len(messages[0]) if len(messages) == 1 else sum(map(len, messages))
        sink = self._sink
        if sink is not None and not self._held and not self._messages:  # (`_deliver`, short)
            self._conn.credit(self._sid, size + 5 * len(messages))  # type: ignore[union-attr]  # (set)
            sink.messages(messages, size)
            return
        if self._messages:
            self._messages += messages
        else:
            self._messages = messages
        self._size += size
        if sink is not None:
            if not self._held:
                self._deliver()
            return
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _end(self, status: str, details: str = "") -> None:
        if self._status is not None:
            return
        self._status, self._details = status, details
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._sink is not None:
            self._deliver()
            return
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _deadline(self, details: str = "deadline exceeded") -> None:
        self._timer = None
        if self._status is None:
            if self._conn is not None:
                self._conn.cancel_stream(self._sid)
            self._end("DEADLINE_EXCEEDED", details)

    def expire_idle(self) -> None:
        """The engine sent nothing for too long (the idle sweeper says so): reset the stream and
        end the call as DEADLINE_EXCEEDED."""
        self._deadline("no message from the engine within the idle limit")
